"""RiverModel options for tests written against the paper's River rather than the defaults."""

from river_cpp.decoding.presets import PAPER

# The paper preset's routing: its river type, the prompt exits as decoded tokens do,
# exited tokens keep the backbone's LM head. Tests pass their own exit policy.
PAPER_RIVER = dict(river=PAPER.river, prefill=PAPER.prefill, river_head=PAPER.river_head)
