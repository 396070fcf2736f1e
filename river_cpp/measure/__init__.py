"""Everything that measures River: speed (bench), quality against the backbone
(evaluate, comparison), threshold calibration, HumanEval, the Pareto plot, and what
they share (configurations, corpus, llama.cpp's quant ladder and peer, weight bytes).

The runtime (model, generation, speculative, sampling, tokenizer, river, policy,
the CLI's generate, chat and server) never imports this package; every measurement
runs the runtime's one generation loop, river_cpp.decoding.generation.generate_step.
"""
