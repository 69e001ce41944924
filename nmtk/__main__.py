"""`python -m nmtk` (and `torchrun -m nmtk`) entry point."""

from nmtk.cli import main

if __name__ == "__main__":
    main()
