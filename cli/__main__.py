"""``python -m cli``: the ``appopt`` command line where the console script is not on PATH."""

from cli.main import main

if __name__ == "__main__":  # not when a spawned worker process imports it
    main()
