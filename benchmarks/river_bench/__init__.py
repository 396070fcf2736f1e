"""The measurements behind the scripts in benchmarks/: lossless decoding against the
backbone and llama.cpp (lossless), the draft-length replay (draft_replay), forward
costs (costs), the draft head's vocabulary (draft_vocab), graph reuse (graph_reuse),
a chat turn's time to first token (chat_ttft), the bandwidth projection (projection),
exact modes A/B (exact_ab), the two backbones' parity (backbone_parity), whole requests
on long inputs (whole_requests), repeated work (repeated_work), structured output
(structured_output, framework_structured), OpenMP's wait policy (wait_policy), the
default against plain decoding (fit_default), and what the scripts share: their options
(options) and prompt sets (prompts).

Not part of the river_cpp package, so the wheel does not ship it: it builds on
river_cpp.measure (corpus, ladder, llama_peer), which the CLI's measuring commands need.
A script run as `python benchmarks/NAME.py` finds this package because Python puts the
script's folder first on sys.path; the tests find it through pytest's `pythonpath`
(pyproject.toml).
"""
