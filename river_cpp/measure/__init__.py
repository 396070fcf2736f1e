"""What the CLI's measuring commands run: speed (bench), quality against the backbone
(evaluate, comparison), threshold calibration (calibrate), HumanEval (humaneval), the
exact-rows check (check_exact), the Pareto plot (pareto), and what they share: the
configurations (configs), the corpus (corpus), llama.cpp's quant ladder (ladder) and
llama.cpp as a peer backbone (llama_peer). The measurements behind the scripts in
benchmarks/ build on it from benchmarks/river_bench, outside the package.

The runtime (model, generation, speculative, sampling, tokenizer, river, policy,
the CLI's generate, chat and server) never imports this package; every measurement
runs the runtime's one generation loop, river_cpp.decoding.generation.generate_step.
"""
