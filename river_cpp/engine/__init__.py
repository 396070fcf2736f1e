"""The engine: a GGUF backbone and its river on ggml.

- model: RiverModel, the object a user holds (weights, cache, tokenizer, forwards);
- _core (C++, csrc/): weights, the shared KV cache, graphs, the forward loop;
- steps: a prompt into the cache, one decode step; language_model: the protocol the
  decoding loop runs on; context: the check that tokens fit;
- tokenizer: llama.cpp's tokenizer and chat templates (vocabulary only);
- river, backbones, convert, cache: the river's GGUF (built and cached), F16
  backbones of quantized releases, the cache folder;
- placement, rpc, extra_bufts: where weights live (devices, RPC servers, the CPU's
  repacked layouts);
- gguf_info: a GGUF header as the engine reads it.

Importing this package first checks the pinned llama-cpp-python and loads its ggml,
which `_core` links to; the engine never imports decoding's policy of a call.
"""

from river_cpp.engine._ggml import check_llama_cpp_python

check_llama_cpp_python()
