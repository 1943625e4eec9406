"""``python -m qlrewrite``."""

from qlrewrite.cli import main

if __name__ == "__main__":
    main()
