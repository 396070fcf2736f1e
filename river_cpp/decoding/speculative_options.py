"""How a call drafts: Speculative, the one typed value of drafting's options (which
draft, how long a round, which sources), checked when it is made, and its defaults.

The round that uses it is river_cpp.decoding.speculative's.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from river_cpp.decoding.draft_memory import DEFAULT_MEMORY_TOKENS
from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.decisions.round_cost import DEFAULT_MAX_DRAFT

# A lookup's draft (an n-gram match, the memory, a corpus) costs nothing to propose,
# so only the verify bounds it. Where the output copies its input, 8-token rounds
# capped it: verifying n positions grows ~0.25-0.3 of a step per position on the
# 1.5B Q4_K_M (2 threads), so 9 tokens a round could never beat 2.8x a step. On its
# recorded input-grounded answers, the bound of drafting only the kept tokens went
# from 1.80x with rounds of 8 to 2.00x with 24, the controller's replay from 1.49x to
# 1.58x, and live from 1.57x to 1.84x (docs/results.md, "Longer lookups").
DEFAULT_MAX_LOOKUP = 24
# A river or model draft ends its round after a token it is unsure of (docs/results.md:
# in replays 0.5 helped every trace but the 0.5B's input-grounded one, -3%).
DEFAULT_P_MIN = 0.5
# None: the river drafts from the whole vocabulary. A prefix pays less than it costs
# on Qwen2.5-Coder-0.5B (docs/results.md): its first 32768 ids skip 78% of the head
# (a quarter of the draft's bytes) but cover only 96% of HumanEval's tokens, and each
# token outside ends a round; at a fixed 4-token draft, acceptance fell from 0.93 to
# 0.79 (32768) and 0.87 (65536) for a 5-20% cheaper draft.
DEFAULT_DRAFT_VOCAB: Optional[int] = None
# The named drafts: the river alone, n-gram matches alone, or both (the portfolio:
# each round the source the running statistics favour).
DRAFTS = ("river+ngram", "river", "ngram")
DEFAULT_DRAFT = "river+ngram"
# Matches outside the context (earlier calls, a corpus) shorter than this are not
# offered: two tokens of code recur everywhere with different continuations.
RECALL_MIN_MATCH = 2


@dataclass(frozen=True)
class Speculative:
    """How to draft: which draft, at most how many tokens a round, when to stop early.

    draft: "river+ngram" (default: each round, an n-gram match from the context or
        the river, whichever the running statistics favour, or neither), "river"
        (every layer on the river, sharing the backbone's cache), "ngram" (only
        matches from the context: needs no river), an ExitPolicy (River's own exits
        drafting, on the same cache), or another Backbone with the same
        vocabulary and its own cache (a smaller GGUF: classic speculative decoding).
    max_draft: most tokens a river or model draft proposes per round.
    max_lookup: most tokens a lookup (an n-gram match, the memory, a corpus)
        proposes per round: free to propose, so longer than max_draft by default.
    p_min: end a river or model draft's round after a token whose own top
        probability is below this (the token is still verified; 0: draft the chosen
        length). The adaptive length then gives such rounds the length that pays at
        full acceptance, as the tokens it drafts past an unsure one are sure ones.
    adaptive: choose each round's source and length from the running acceptance and
        the measured costs of drafting and verifying (plain decoding when no draft
        pays); False always drafts max_draft (or until p_min ends it, or the match's end).
    draft_vocab: a river draft proposes only token ids below this (its head scores
        no others); None: the whole vocabulary. The output stays the backbone's
        either way: a token the draft cannot propose is the backbone's own next
        token after a rejection.
    ngram_min, ngram_max: the n-gram sizes matched in the context (longest first).
    memory: with n-gram drafts, also draft from the model's memory of earlier calls
        (their prompts and outputs; river_cpp.decoding.draft_memory), and remember
        this call there. The memory is the model object's own.
    memory_tokens: the memory's capacity in tokens (least recently used go first).
    corpus: with n-gram drafts, also draft from these files and folders (a project's
        code, text; river_cpp.decoding.draft_corpus): indexed once, cached on disk by
        content, memory-mapped.
    """

    draft: Union[str, ExitPolicy, Backbone] = DEFAULT_DRAFT
    max_draft: int = DEFAULT_MAX_DRAFT
    max_lookup: int = DEFAULT_MAX_LOOKUP
    p_min: float = DEFAULT_P_MIN
    adaptive: bool = True
    draft_vocab: Optional[int] = DEFAULT_DRAFT_VOCAB
    ngram_min: int = DEFAULT_NGRAM_MIN
    ngram_max: int = DEFAULT_NGRAM_MAX
    memory: bool = True
    memory_tokens: int = DEFAULT_MEMORY_TOKENS
    corpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.draft, str) and self.draft not in DRAFTS:
            raise ValueError(f"draft must be one of {', '.join(DRAFTS)}, an ExitPolicy or a model, got {self.draft!r}")
        _check_int("max_draft", self.max_draft, 1, 64)
        _check_int("max_lookup", self.max_lookup, 1, 64)
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, numbers.Real) or not 0.0 <= self.p_min < 1.0:
            raise ValueError(f"p_min must be a number in [0, 1), got {self.p_min!r}")
        if self.draft_vocab is not None:
            _check_int("draft_vocab", self.draft_vocab, 1, None)
        _check_int("ngram_min", self.ngram_min, 1, 16)
        _check_int("ngram_max", self.ngram_max, self.ngram_min, 16)
        if not isinstance(self.memory, bool):
            raise ValueError(f"memory must be True or False, got {self.memory!r}")
        _check_int("memory_tokens", self.memory_tokens, 1, None)
        object.__setattr__(self, "corpus", _corpus_paths(self.corpus))

    @property
    def uses_river(self) -> bool:
        """Whether this draft runs the model's river."""
        return isinstance(self.draft, ExitPolicy) or self.draft in ("river", "river+ngram")

    @property
    def uses_ngrams(self) -> bool:
        return self.draft in ("ngram", "river+ngram")


def _corpus_paths(corpus: object) -> tuple[str, ...]:
    """`corpus` (one path or a sequence of them) as a tuple of path strings."""
    if isinstance(corpus, (str, Path)):
        corpus = (corpus,)
    if not isinstance(corpus, (tuple, list)) or not all(isinstance(p, (str, Path)) and str(p) for p in corpus):
        raise ValueError(f"corpus must be a path or a sequence of paths, got {corpus!r}")
    return tuple(str(p) for p in corpus)


def _check_int(name: str, value: object, low: int, high: Optional[int]) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < low
        or (high is not None and value > high)
    ):
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {span}, got {value!r}")
