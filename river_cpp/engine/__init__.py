"""The engine, the ground floor: a GGUF backbone that turns token ids into logits, in
four kinds of module, each a subpackage, each floor importing only those below it:

- decisions: made once per file and host, each in one place: backbone_choice (which
  backbone runs a file), river_choice (which river pays), parallel_choice (how many
  requests a server batches), round_cost (a drafted round's arithmetic), and loading
  (open_backbone: the one place the decisions open the backbone they call for);
- compute: backbone (the interface the decoding loops run on), graph_backbone
  (river-cpp's own graph, _core, with the river sharing its KV cache), llama_backbone
  (llama.cpp's own context, for every architecture llama.cpp runs), load_options,
  placement (where layers compute), sequences and batcher (several sequences),
  policy (exit thresholds), context (the check that tokens fit), tokenizer, and
  prompt_cache (earlier prompts' KV states);
- probes: what this host allows, probed once and cached: extra_bufts (the CPU's
  repacked layouts), own_products (our own kernels), rpc (RPC servers);
- files: gguf_info (a GGUF header as the engine reads it), river (the river's GGUF,
  built and cached), backbones (F16 backbones of quantized releases), convert, cache
  (the cache folder), weight_bytes (the bytes a step reads), hub (the Hugging Face Hub).

_core (the C++ extension, csrc/) and _ggml (the pinned llama-cpp-python's ggml) stay
here, under all four. Importing this package first checks the pinned
llama-cpp-python and loads its ggml, which `_core` links to. Nothing here imports
decoding, apps or measure.
"""

from river_cpp.engine._ggml import check_llama_cpp_python

check_llama_cpp_python()
