"""tritred-cli: the ``tritred`` command (``list``, ``plugins``, ``explain``, ``tune``, ``check``, ``bench``).

The app is :data:`tritred_cli.main.app` (a typer app); each command group is a module of
:mod:`tritred_cli.commands` (``listing``: list and plugins, ``explain``, ``tune``, ``check``, ``bench``), and
:mod:`tritred_cli.common` holds what they share. It imports neither torch nor tritred_ops at import time:
on a machine without CUDA it sets ``TRITON_INTERPRET=1`` first, then the registry loads the plugins.
"""

__version__ = "0.1.0"
