"""Named River setups the package owns: what "the defaults" and "the paper's River" mean.

A preset fixes every choice that decides which weights a token multiplies with: the
river's type, the LM head of exited tokens, the prompt's route, the decode exit
policy, the least depth of a threshold exit, and whether the river only drafts
(lossless: the backbone verifies every token). RiverModel's defaults are the
`lossless` preset (DEFAULT); `river-cpp generate --preset`, the measurement configurations
(river_cpp.measure.configs) and the tests name one. Knows nothing of files or models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from river_cpp.engine.compute.load_options import AUTO_RIVER
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.files.river import DEFAULT_HEAD_TYPE


@dataclass(frozen=True)
class Preset:
    """One named way to run a backbone with its river."""

    name: str
    river: str  # the river type built from the backbone (AUTO_RIVER: the one that pays, or none)
    river_head: Union[bool, str]  # exited tokens' LM head: a type, True (the river's type), False (the backbone's)
    prefill: str  # the prompt's route: "backbone" (full precision) or "exit"
    tau: Optional[float]  # decode exits at this uniform threshold; None: every token on the river
    min_layer: int  # least backbone layers before a threshold exit is checked
    speculative: bool = False  # lossless River: the river drafts, the backbone verifies

    @property
    def policy(self) -> ExitPolicy:
        """The decode exit policy: never for a lossless preset (the river only drafts),
        else uniform(tau) from min_layer, or every token on the river."""
        if self.speculative:
            return ExitPolicy.never()
        return ExitPolicy.at_layer(0) if self.tau is None else self.uniform(self.tau)

    def uniform(self, tau: float, *, signal: str = "cosine") -> ExitPolicy:
        """A uniform threshold exit at this preset's least depth."""
        return ExitPolicy.uniform(tau, min_layer=self.min_layer, signal=signal)

    def model_options(self) -> dict:
        """RiverModel keyword arguments of this preset: river, river_head, prefill,
        policy and speculative."""
        return {
            "river": self.river,
            "river_head": self.river_head,
            "prefill": self.prefill,
            "policy": self.policy,
            "speculative": self.speculative,
        }


# The fastest lossy decode measured (docs/results.md): a Q8_0 river and head, the
# prompt on the backbone (full-precision KV), every decoded token on the river. A
# threshold exit (--tau) starts checking after 2 layers, as the paper's does.
FAST = Preset("fast", river="q8_0", river_head="q8_0", prefill="backbone", tau=None, min_layer=2)
# The paper's River (Shen & Zou): a Q4_0 river, the backbone's head, the prompt exits
# too (at one depth), each decoded token where the similarity first passes tau.
PAPER = Preset("paper", river="q4_0", river_head=False, prefill="exit", tau=0.98, min_layer=2)

# Lossless River, the library's default: the backbone's own tokens, faster where drafts
# are accepted (docs/results.md, "Lossless River"): n-gram matches from the context and,
# where one pays on the file (docs/river-choice.md), a low-bit river with a
# 4-bit head drafting on the shared cache; the backbone verifies.
LOSSLESS = Preset(
    "lossless",
    river=AUTO_RIVER,
    river_head=DEFAULT_HEAD_TYPE,
    prefill="backbone",
    tau=None,
    min_layer=2,
    speculative=True,
)
DEFAULT = LOSSLESS

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (LOSSLESS, FAST, PAPER)}


def preset(name: str) -> Preset:
    """The preset called `name` ("lossless", "fast", "paper"); ValueError naming the known ones."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None
