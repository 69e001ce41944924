"""Corpora: reading and checks, download/cache, binarised memmap splits, token-bucket batching."""
