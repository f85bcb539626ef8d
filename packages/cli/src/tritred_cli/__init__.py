"""tritred-cli: the ``tritred`` command (``list``, ``plugins``, ``explain``, ``check``, ``bench``).

The app is :data:`tritred_cli.main.app` (a typer app). It imports neither torch nor tritred_ops at import time:
on a machine without CUDA it sets ``TRITON_INTERPRET=1`` first, then the registry loads the plugins.
"""

__version__ = "0.1.0"
