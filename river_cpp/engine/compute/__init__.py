"""What computes: the backbones (river-cpp's graph and llama.cpp's context), their
load options, where their layers compute (placement), the sequences generations
lease, the batched forwards of several sequences, exit policies, the context check,
the tokenizer and the prompt cache of earlier requests' KV states.
"""
