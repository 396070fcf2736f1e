"""Decoding: how one call turns logits into tokens.

- decision: how one call decodes (exit policy, draft, sampling), decided once;
- generation: the loop (generate_step -> stream_generate -> generate), stops, text;
- steps: what both token loops build on (the cache brought to a prompt, one decode step);
- sampling: SamplingParams and the sampler (llama.cpp's stage order);
- grammar: llama.cpp's grammar engine, for constrained decoding;
- presets: the named River setups;
- speculative: drafts verified by the backbone (the round loop); speculative_options
  (Speculative, how a call drafts), speculative_stats (what a drafted generation did);
- drafts, ngram: the draft sources behind one interface, the n-gram index;
- draft_memory, draft_corpus, suffix_index: drafts from earlier calls and from a
  corpus, over one index of where a context's last tokens occurred;
- acceptance: which drafted tokens the backbone keeps (pure functions);
- draft_length: each round's source and length from measured costs;
- draft_guard: a request's guard against drafts that lose to plain decoding;
- exit_stats: summaries of per-token exit records.
"""
