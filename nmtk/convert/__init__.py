"""Converters between nmtk runs and other formats: CTranslate2 (`ctranslate2`)."""
