"""`python -m kit` is the same as the `kit` console script."""

from kit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
