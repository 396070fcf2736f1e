"""Speed of River configurations and of llama.cpp on the same backbone: `river-cpp bench`.

Split by concern: .runners (what runs, the interleaved schedule, the token
sequence), .report (rows, table, JSON), .rss (peak resident memory in a fresh
process). It does not judge quality: that is
river_cpp.measure.evaluate's job, which may read decode speeds from here.

How it measures
---------------
- Every configuration (ours: RiverModel in a RiverConfig; peers: llama.cpp through
  LlamaCppPeer on the backbone GGUF, "F16", or on a cached llama.cpp quantization of it) is
  loaded at once in this process, with the same context length, batch size (512) and
  threads (for single tokens and batches alike). llama.cpp runs without flash
  attention, as our engine does, and both hand Python the last position's logits.
  Both run the same loop, river_cpp.decoding.generation.generate_step.
- After one untimed warm-up of each test, each repetition runs every configuration's
  tests in turn (round-robin), so slow drifts of the machine (other load, heat) fall
  on all configurations alike rather than on whichever ran last.
- ppN: N prompt tokens from an empty cache, one timed forward (split into 512-token
  batches by both engines).
- tgN: an untimed prefill of TG_CONTEXT tokens, then N timed single-token decode steps.
  llama-bench decodes from an empty context; the short prefill makes the decoded
  tokens continue text, as in generation, and the context stays short as in llama-bench.
- The token ids are the same fixed sequence for every configuration: the project's
  chat prompts (river_cpp.measure.corpus.chat_prompts, in the model's chat template) tokenized
  by the backbone's vocabulary, repeated when a test needs more. llama-bench feeds
  random ids, which cost the same as text for a plain model; River's exits depend on
  the text, so random ids would measure exit rates no user sees. Decode steps feed the
  sequence's next tokens (teacher forcing), not each configuration's own greedy
  choice, so all configurations do the same work but for where their tokens exit.
- A River configuration's tokens take their own exits, as in generation: the prompt
  exits at one depth, each decoded token at its own. The mean exit layer of each test
  (backbone layers per token; n_layer means never left) is recorded from the warm-up.
- size: the bytes of weight tensors the configuration loads (llama-bench's "size"):
  the backbone's, plus the river's for a River configuration (the full river still
  maps the backbone for its embedding and output head).
- peak RSS: measured apart from the speed runs, since one process's high-water mark
  cannot be split between the models it holds. Each configuration is loaded alone in a
  fresh Python process that runs each test once; its peak resident set size (VmHWM on
  Linux, ru_maxrss elsewhere) is reported. It includes the interpreter and libraries (rss_baseline_bytes: the same
  process's mark before loading the model) and the mapped weight pages it touched.

JSON (BenchReport.to_json)
--------------------------
    {"format": "river-cpp-bench/1",
     "model": "path/of/backbone.gguf", "n_layer": 30,
     "n_prompt": 512, "n_gen": 128, "repetitions": 5, "n_threads": 4, "n_ctx": 512,
     "tg_context": 16, "cpu_count": 8,
     "load_average": 2.2,   # 1-minute load after the timed runs, their own threads included
     "rss_baseline_bytes": 123456789,                          # or null: not measured
     "versions": {"river_cpp": "0.1.0", "llama_cpp_python": "0.3.36"},
     "rows": [{"config": "river tau=0.98", "engine": "river-cpp",   # or "llama.cpp"
               "test": "tg128", "n_tokens": 128, "size_bytes": 367001600,
               "t_s_mean": 101.2, "t_s_sd": 1.3, "samples": [100.1, 102.3],   # tokens/s
               "mean_exit_layer": 15.8,                                  # null for llama.cpp
               "peak_rss_bytes": 512000000}, ...]}                     # null: not measured

Rows come in the order measured: each configuration's pp row, then its tg row.
"""

from river_cpp.measure.bench.report import (
    BACKBONE_RUNG,
    FORMAT,
    LLAMA_ENGINE,
    REFERENCE,
    RIVER_ENGINE,
    TG_CONTEXT,
    BenchReport,
    BenchRow,
)
from river_cpp.measure.bench.rss import max_rss_bytes
from river_cpp.measure.bench.runners import DEFAULT_PEERS, bench_tokens, default_configs, gguf_tensor_bytes
from river_cpp.measure.bench.session import measure

__all__ = [
    "BACKBONE_RUNG",
    "DEFAULT_PEERS",
    "FORMAT",
    "LLAMA_ENGINE",
    "REFERENCE",
    "RIVER_ENGINE",
    "TG_CONTEXT",
    "BenchReport",
    "BenchRow",
    "bench_tokens",
    "default_configs",
    "gguf_tensor_bytes",
    "max_rss_bytes",
    "measure",
]
