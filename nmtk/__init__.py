"""nmtk: the Transformer of "Attention Is All You Need" and the workflow around it."""

__version__ = "0.1.0"
