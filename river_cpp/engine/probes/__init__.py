"""What this host allows, probed once and cached: the CPU's repacked layouts (ggml's
extra buffer types), our own products' kernels, and RPC servers.
"""
