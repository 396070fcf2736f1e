"""Everything that measures River: speed (bench), quality against the backbone
(evaluate, comparison), threshold calibration, HumanEval, the Pareto plot, and what
they share (configurations, corpus, llama.cpp's quant ladder and peer, weight bytes).
The measurements behind the scripts in benchmarks/ live here too: lossless decoding
against the backbone and llama.cpp (lossless), the draft-length replay
(draft_replay), forward costs (costs), the draft head's vocabulary (draft_vocab),
graph reuse (graph_reuse), a chat turn's time to first token (chat_ttft), the
bandwidth projection (projection), and the scripts' shared options (options).

The runtime (model, generation, speculative, sampling, tokenizer, river, policy,
the CLI's generate, chat and server) never imports this package; every measurement
runs the runtime's one generation loop, river_cpp.decoding.generation.generate_step.
"""
