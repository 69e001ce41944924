"""MarianMT (transformers): the weight map, import and export."""
