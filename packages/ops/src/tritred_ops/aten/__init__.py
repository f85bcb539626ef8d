"""Routing torch's own aten ops to tritred: :func:`enable`, :func:`disable`, :func:`enabled_stats`.

::

    import tritred_ops

    with tritred_ops.enable():                     # torch.softmax, F.layer_norm, x.sum(1) ... on CUDA run tritred
        loss = model(x).sum(); loss.backward()     # the backward ops too
    print(tritred_ops.enabled_stats())             # {"aten::_softmax": OpCounts(tritred=12, fallback=0, ...), ...}

    tritred_ops.enable(exclude=["batch_norm"])     # a global switch ...
    tritred_ops.disable()                          # ... and off

How: ``torch.library.Library("aten", "IMPL")`` registrations at the CUDA dispatch key (FlagGems' ``use_gems``
pattern) of the overloads in :data:`TABLE` (:mod:`.table`): the ops where eager calls land below autograd —
``_softmax``, ``_log_softmax`` and their ``_backward_data``, ``logsumexp``, ``native_layer_norm(_backward)``,
``_fused_rms_norm(_backward)``, ``native_batch_norm``, ``_native_batch_norm_legit`` (and ``.no_stats``),
``_native_batch_norm_legit_no_training``, ``cudnn_batch_norm``, ``native_batch_norm_backward``,
``cudnn_batch_norm_backward``, ``sum.dim_IntList``, ``mean.dim``, ``prod`` / ``prod.dim_int``, ``amax``,
``amin``, ``max`` / ``max.dim``, ``min`` / ``min.dim``, ``var`` / ``std`` / ``var_mean`` / ``std_mean``
``.correction``. Autograd stays torch's: its formulas call the overridden backward ops. Each implementation
(:mod:`.impls`) calls the family's launcher for the inputs it takes and hands every other call to torch's
original kernel (captured with ``torch.library.get_kernel`` before the registration): dtypes without a tritred
kernel (complex, integer means and softmaxes), parameter dtypes tritred does not mix, argument forms tritred
refuses (its checks' errors: torch's kernel then computes the call or raises torch's own error). ``out=``
variants and in-place ops are not overridden.

Scopes: ``enable()`` opens a scope and returns it (:class:`~.scope.AtenOverride`); ``with`` closes it on exit,
``close()`` or :func:`disable` (which closes every scope) too. Scopes nest: the innermost open one decides which
overloads route to tritred, and closing it restores the enclosing one's choice; closing the last one destroys
the registrations (torch's kernels are back, nothing of tritred is called). The override is process-wide, not
per thread (the dispatcher has one table; CUDA backward ops run on autograd's own threads): while a scope is
open, every thread's calls are routed. ``enable``/``disable``/``close`` are serialized by a lock and safe from any
thread; counters are updated under it.

Compile: ``torch.compile`` traces and decomposes above the CUDA key, so Inductor's generated code never sees these
overrides (only aten kernels it calls as fallbacks, and ``aot_eager``'s eager execution of its graph, reach them).
Calls made while dynamo traces go to torch's kernels. A compiled function under ``enable()`` runs and equals
eager. To put tritred inside compiled graphs, call the functional ops or the modules (``torch.ops.tritred.*``).

Tests: ``enable(device="cpu")`` registers the same table at the CPU key, only under ``TRITON_INTERPRET=1``.
"""

from .scope import AtenOverride, OpCounts, active_scopes, disable, enable, enabled_stats
from .table import TABLE, Entry

__all__ = ["TABLE", "AtenOverride", "Entry", "OpCounts", "active_scopes", "disable", "enable", "enabled_stats"]
