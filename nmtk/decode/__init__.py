"""Decoding: search algorithms over the model core, and the text-to-text translator."""
