"""What users run on a RiverModel.

- llama, llama_compat, patch: river_cpp.Llama (llama-cpp-python's `Llama` on river-cpp),
  the constructor keywords it takes, and patch_llama_cpp for frameworks that build
  llama_cpp.Llama themselves;
- completions, completion_text: OpenAI-shaped completions and chat completions
  (llama-cpp-python's API), their text as llama-cpp-python gives it from the tokens' bytes;
- chat_template, structured, tools: the GGUF's chat template, response_format and
  grammars, tool calls;
- embeddings: llama.cpp's pooled embeddings of the same file;
- chat: the terminal chat; exit_display: tokens coloured by their exit depth;
- cli: the `river-cpp` command, one module per subcommand;
- server: the OpenAI-compatible HTTP server;
- hub, demo, info: files from the Hugging Face Hub, the bundled demo model, what
  river-cpp runs on.
"""
