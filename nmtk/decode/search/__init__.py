"""Searches over ids: tensors in, hypotheses out.

This layer knows a model only through the ``Decoder`` protocol (``contract.py``) and knows nothing of
text: no pipeline, no run directory, no files. The text-level layer above it (``nmtk/decode/``:
translators, engines, the ``translate`` stream, glossaries) turns lines into ids and hands them here.
``config.py`` is shared by both layers and imports no torch, so the CTranslate2 path can use it; this
file imports nothing for the same reason.
"""
