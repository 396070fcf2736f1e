"""What a drafted generation did: drafts offered and kept per source, rounds, the
round guard's pauses and its whole rounds' times (the footer's estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from river_cpp.decoding.draft_guard import ALL, RoundTimes
from river_cpp.decoding.draft_length import PLAIN, drafts_by_source


@dataclass
class SourceStats:
    """Counts of one draft source in one generation."""

    rounds: int = 0  # rounds it was chosen for (a river round's copied matches count under their n-gram)
    drafted: int = 0  # tokens it proposed, in rounds of its own or copied into the river's
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class SpeculativeStats:
    """Counts of one speculative generation."""

    rounds: int = 0  # backbone verify forwards
    drafted: int = 0  # tokens the drafts proposed
    accepted: int = 0  # drafted tokens the backbone kept
    generated: int = 0  # tokens the rounds produced (accepted + the backbone's own + forced)
    forced: int = 0  # tokens a grammar allowed alone: taken without a draft or a forward of their own
    draft_forwards: int = 0  # single-token forwards of a river or model draft
    draft_seconds: float = 0.0  # spent drafting (forwards, lookups and choosing the drafted tokens)
    catch_up_seconds: float = 0.0  # of draft_seconds, a separate draft's catching its cache up (Proposal)
    verify_seconds: float = 0.0  # spent verifying (the backbone's forwards and the comparisons)
    by_source: dict[str, SourceStats] = field(default_factory=dict)  # "river", "ngram1".., "memory2".., "plain"
    memory_tokens: int = 0  # tokens in the model's memory of earlier calls as this one began
    memory_capacity: int = 0  # ... and its capacity (0: no memory drafted)
    corpus_tokens: int = 0  # tokens in the corpus index (0: none)
    guard_rests: int = 0  # times the round guard rested a source whose rounds lost to plain (RoundGuard)
    guard_rested: set[str] = field(default_factory=set)  # the sources it rested (ALL: drafting as a whole)
    round_times: RoundTimes = field(default_factory=RoundTimes)  # whole rounds, plain and drafted, as it timed them

    @property
    def acceptance_rate(self) -> float:
        """Share of drafted tokens kept (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens produced per backbone forward (1.0 is plain decoding)."""
        return self.generated / self.rounds if self.rounds else 0.0

    def summary(self) -> str:
        """One line: what was drafted and kept, by source, in words a first run reads."""
        sources = "; ".join(
            f"{source_words(name)}: {s.rounds} round{'' if s.rounds == 1 else 's'}"
            + (f", {s.drafted} drafted ({100 * s.acceptance_rate:.0f}% kept)" if s.drafted else "")
            for name, s in sorted(self.by_source.items())
        )
        indexes = []
        if self.memory_capacity:
            indexes.append(f"memory of earlier calls {self.memory_tokens:,} of {self.memory_capacity:,} tokens")
        if self.corpus_tokens:
            indexes.append(f"corpus {self.corpus_tokens:,} tokens")
        return (
            f"speculative: {self.drafted} drafted, {self.accepted} kept "
            f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_round:.2f} tokens per backbone forward"
            + (f". By source: {sources}" if sources else "")
            + (f"; {_paused_drafts(self.guard_rested)}" if self.guard_rested else "")
            + (f"; {', '.join(indexes)}" if indexes else "")
        )

    def speed_summary(self) -> Optional[str]:
        """One line: this request's speed against plain decoding, estimated from its own
        rounds (RoundTimes.speedup); None where no round drafted."""
        times = self.round_times
        if times.drafted_tokens == 0:
            return None
        speedup = times.speedup()
        if speedup is None:
            return (
                f"speed: not estimated against plain decoding (fewer than {times.MIN_PLAIN_ROUNDS} steps of this "
                "answer were decoded plain to compare with)"
            )
        plain_rate = times.plain_tokens / times.plain_seconds
        drafted_rate = times.drafted_tokens / times.drafted_seconds
        return (
            f"speed: about {speedup:.2f}x plain decoding (an estimate from this answer's own steps: those "
            f"decoded plain ran at {plain_rate:.1f} tokens/s, those with drafts at {drafted_rate:.1f} tokens/s)"
        )

    def count(self, source: str, spans: Sequence[tuple[str, int]], n_accepted: int) -> None:
        """One round that `source` chose (PLAIN: none), whose drafts came in `spans`."""
        self.by_source.setdefault(source, SourceStats()).rounds += 1
        for name, count in spans:
            self.by_source.setdefault(name, SourceStats()).drafted += count
        for name, (_, accepted) in drafts_by_source(spans, n_accepted).items():
            self.by_source[name].accepted += accepted


# What each kind of statistics' name (river_cpp.decoding.drafts: "ngram3", "copy2",
# "memory4", ...) stands for, in the words of a first run.
_KIND_WORDS = {
    "ngram": "repeats in the text",
    "copy": "repeats in the text, copied into river drafts",
    "memory": "earlier calls",
    "corpus": "the corpus",
    "river": "the river",
    "model": "the draft model",
    PLAIN: "no draft (plain steps)",
}


def _kind(name: str) -> Optional[str]:
    return next((k for k in _KIND_WORDS if name.startswith(k)), None)


def source_words(name: str) -> str:
    """A statistics' name in plain words: "ngram3" -> "repeats in the text (3-token matches)"."""
    kind = _kind(name)
    if kind is None:
        return name
    length = name[len(kind) :]
    return _KIND_WORDS[kind] + (f" ({length}-token matches)" if length.isdigit() else "")


def _paused_drafts(rested: set[str]) -> str:
    """Which drafts the round guard paused, by kind (ALL: drafting as a whole)."""
    kinds = {"ngram" if _kind(name) == "copy" else _kind(name) for name in rested - {ALL}}
    named = sorted(f"drafts from {_KIND_WORDS[k]}" if k else "other drafts" for k in kinds)
    if ALL in rested:
        named.append("all drafts")
    return f"{' and '.join(named)} paused for a while: they were slower than plain decoding here"
