"""Files: GGUF headers as the engine reads them, the river's GGUF (built and cached),
F16 backbones of quantized releases, the cache folder, the bytes a step reads, and
GGUF files from the Hugging Face Hub.
"""
