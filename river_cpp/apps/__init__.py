"""What users run on a RiverModel.

- completions: OpenAI-shaped completions and chat completions (llama-cpp-python's API);
- chat: the terminal chat; exit_display: tokens coloured by their exit depth;
- cli: the `river-cpp` command, one module per subcommand;
- server: the OpenAI-compatible HTTP server;
- hub, demo, info: files from the Hugging Face Hub, the bundled demo model, what
  river-cpp runs on.
"""
