"""``python -m eval ...``: see :mod:`eval.cli`."""
from eval.cli import main

if __name__ == "__main__":
    main()
