"""Greedy completions of HumanEval prompts by any Backbone.

One completer for every engine: RiverModel in a RiverConfig and llama.cpp through
LlamaCppPeer both run river_cpp.decoding.generation.generate (the same tokenizer, greedy
choice and stop handling), so a difference between rows is the model's, not the
loop's. Owns how a completion is cut and counted; not the problems or the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from river_cpp.decoding.generation import generate
from river_cpp.engine.compute.backbone import Backbone

if TYPE_CHECKING:
    from river_cpp.decoding.speculative import Speculative

RIVER_ENGINE, LLAMA_ENGINE = "river-cpp", "llama.cpp"
# HumanEval's completion-mode stops (as in the Codex paper's harness): a line that
# starts a new top-level statement ends the function body being completed.
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert")


def truncate_at_stops(text: str, stops: Sequence[str] = STOP_SEQUENCES) -> str:
    """`text` up to (not including) the first stop sequence it contains."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


@dataclass(frozen=True)
class Completion:
    """A generated completion (already cut at the stops), its token count and, for
    River, the backbone layers of each forward that chose a token."""

    text: str
    n_tokens: int
    exit_layers: tuple[int, ...] = ()


class Completer(Protocol):
    """Something that completes a prompt greedily."""

    name: str
    engine: str
    n_layer: Optional[int]

    def complete(self, prompt: str, *, max_tokens: int, stops: Sequence[str]) -> Completion: ...

    def close(self) -> None: ...


class ModelCompleter:
    """Greedy completions of one loaded model (a RiverModel or a LlamaCppPeer), which
    it owns and closes. speculative: lossless River (the backbone's tokens)."""

    def __init__(self, name: str, engine: str, model: Backbone, *, speculative: Optional[Speculative] = None) -> None:
        self.name = name
        self.engine = engine
        self.model = model
        self.speculative = speculative
        # exit layers are recorded for River configurations that have a river
        self._exits = engine == RIVER_ENGINE and bool(getattr(model, "has_river", False))
        self.n_layer: Optional[int] = model.n_layer if engine == RIVER_ENGINE else None

    def complete(self, prompt: str, *, max_tokens: int, stops: Sequence[str]) -> Completion:
        """Greedy continuation of `prompt`, ending at a stop, end of generation,
        max_tokens or a full context."""
        result = generate(
            self.model, prompt, max_tokens=max_tokens, temperature=0.0, stop=list(stops), speculative=self.speculative
        )
        exits = tuple(int(d) for d in result.exit_layers) if self._exits else ()
        n_tokens = len(result.token_ids)
        if n_tokens and self.model.tokenizer.is_end_of_generation(result.token_ids[-1]):
            n_tokens -= 1  # text tokens only
        return Completion(truncate_at_stops(result.text, stops), n_tokens, exits)

    def close(self) -> None:
        self.model.close()
