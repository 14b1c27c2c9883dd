"""The ``appopt`` command line: thin typer commands (``main`` and one ``*_cmds`` module per area) over the domain
packages. Nothing else of ours imports it (import-linter contracts in pyproject.toml)."""
