"""`python -m crw`: the same entry point as the `crw` console script."""

from crw.cli import main

if __name__ == "__main__":
    main()
