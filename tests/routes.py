"""RiverModel options for tests written against the paper's River rather than the defaults."""

# A Q4_0 river; the prompt exits as decoded tokens do; exited tokens keep the
# backbone's LM head. (The defaults are a Q8_0 river and head and a backbone prompt.)
PAPER_RIVER = dict(river="q4_0", prefill="exit", river_head=False)
