"""The engine, the ground floor: a GGUF backbone that turns token ids into logits.

- backbone: the interface the decoding loops run on (forward, rewind, the cached
  prefix, sizes, tokenizer, close) and the checks its implementations share;
- graph_backbone: river-cpp's own graph (_core, C++ in csrc/) with the river sharing its
  KV cache, exit policies, placement on devices and RPC servers;
- llama_backbone: llama.cpp's own context, for every architecture llama.cpp runs (no river);
- backbone_choice: which of the two runs a file; river_choice: which river pays on it;
- load_options: how a model loads (LoadOptions, checked once); loading: open_backbone,
  the one place that opens the backbone a file and its options call for;
- policy: the exit thresholds per depth; context: the check that tokens fit;
- prompt_cache: earlier prompts' KV states, kept by their token ids;
- tokenizer: llama.cpp's tokenizer and chat templates (vocabulary only);
- river, backbones, convert, cache, weight_bytes: the river's GGUF (built and cached),
  F16 backbones of quantized releases, the cache folder, the bytes a step reads;
- hub: GGUF files from the Hugging Face Hub (its cache; the `[hf]` extra);
- placement, rpc, extra_bufts: where weights live (devices, RPC servers, the CPU's
  repacked layouts); gguf_info: a GGUF header as the engine reads it.

Importing this package first checks the pinned llama-cpp-python and loads its ggml,
which `_core` links to. Nothing here imports decoding, apps or measure.
"""

from river_cpp.engine._ggml import check_llama_cpp_python

check_llama_cpp_python()
