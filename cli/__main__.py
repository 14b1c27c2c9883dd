"""``python -m cli``: the ``appopt`` command line where the console script is not on PATH."""

from cli.main import main

main()
