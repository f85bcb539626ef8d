"""The ``tritred`` commands, one module per command group; :mod:`tritred_cli.main` registers them."""
