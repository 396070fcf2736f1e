"""Decoding: how one call turns logits into tokens.

- generation: the loop (generate_step -> stream_generate -> generate), stops, text;
- sampling: SamplingParams and the sampler (llama.cpp's stage order);
- policy, presets: exit thresholds and the named River setups;
- speculative: drafts verified by the backbone (the round loop, its statistics);
- drafts, ngram: the draft sources behind one interface, the n-gram index;
- acceptance: which drafted tokens the backbone keeps (pure functions);
- draft_length: each round's source and length from measured costs;
- exit_stats: summaries of per-token exit records.
"""
