"""M2M-100 and NLLB (transformers): the folder, the weight map, import and export."""
