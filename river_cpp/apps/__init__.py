"""What users run on a RiverModel.

- llama, llama_completions, llama_low_level, llama_members, llama_compat, patch:
  river_cpp.Llama (llama-cpp-python's `Llama` on river-cpp: construction, its
  completions, eval / sample / generate, the members frameworks read), the constructor
  keywords it takes, and patch_llama_cpp for frameworks that build llama_cpp.Llama
  themselves;
- embeddings: llama.cpp's pooled embeddings of the same file;
- chat: the terminal chat; exit_display: tokens coloured by their exit depth;
- cli: the `river-cpp` command, one module per subcommand;
- server: the OpenAI-compatible HTTP server;
- demo, info: the bundled demo model, what river-cpp runs on.

The OpenAI-shaped completions they serve are river_cpp.completions', a floor below.
"""
