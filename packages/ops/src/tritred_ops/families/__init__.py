"""The op families: one package each, with its kernels, its host path and its launch rules.

- :mod:`.reduce`: sum, mean, prod, amax, amin, max, min;
- :mod:`.statistics`: var, std, var_mean, std_mean;
- :mod:`.softmax`: softmax, log_softmax, logsumexp;
- :mod:`.layer_norm`: layer_norm, layer_norm_with_stats;
- :mod:`.batch_norm`: batch_norm;
- :mod:`.rms_norm`: rms_norm (its backward is layer_norm's kernel without the mean).
- :mod:`.cross_entropy`: cross_entropy (forward and backward).

Each package reads top to bottom: ``__init__.py`` (the public functions with torch's signatures, and the
:class:`~tritred_core.ReductionSpec` of each op in ``SPECS``), ``kernels.py`` (the Triton kernels),
``launch.py`` (the host path: checks, the canonical view, the launch decision, launches, replay) and
``rules.py`` (the family's launch rules). Backward kernels and their launchers go beside the forward ones.

(The packages are not named after their ops directly under ``tritred_ops``: ``tritred_ops.softmax`` is the
function.)
"""
