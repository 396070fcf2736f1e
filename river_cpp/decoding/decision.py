"""How one call decodes, decided in one place: the exit policy, the draft, the sampling.

Every entry point turns what it was given into a Decoding here: RiverModel's
constructor (its defaults), generate and create_*completion (per call), the CLI's
generate, chat and serve (a preset and options), the server's request parser (the
`river` field) and the chat REPL's /tau. The loops below receive the value and never
decide again.

The rules, whoever asks:
- nothing said: the defaults (a model's, or a preset's on a model with or without a
  river; the library's are the lossless preset's: drafts verified by the backbone,
  the river and n-gram matches with a river, n-gram matches alone without one);
- a policy that exits (a lossy decode: tau, an exit layer, calibrated thresholds),
  with nothing said of drafting: plain decoding under it; a policy that never exits
  keeps the defaults' draft;
- speculative=False: plain decoding; True: the default draft of what the model has
  (with an exiting policy, River's own exits draft); a Speculative: that draft;
- a draft named (`draft=`, the CLI's --draft) replaces the draft of a decode that
  drafts, and is an error for one that does not (never silently ignored).

Sampling defaults come from one table per entry kind (SAMPLING_DEFAULTS).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Union

from river_cpp.decoding.presets import DEFAULT, Preset
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative_options import DEFAULT_DRAFT, Speculative
from river_cpp.engine.compute.policy import ExitPolicy, check_policy

SpeculativeOption = Union[bool, Speculative, None]

# The sampling defaults of each kind of entry point (the settings not named are
# SamplingParams'). generate is greedy, so that a call or a command line without
# options gives the same text every time; the OpenAI-shaped calls and the server's
# endpoints take llama-cpp-python's defaults (its create_completion samples at 0.8,
# create_chat_completion at 0.2); the chat REPL samples a little, as chat UIs do.
SAMPLING_DEFAULTS: dict[str, SamplingParams] = {
    "generate": SamplingParams(),  # RiverModel.generate, `river-cpp generate`
    "completion": SamplingParams(temperature=0.8),  # create_completion, POST /v1/completions
    "chat": SamplingParams(temperature=0.2),  # create_chat_completion, POST /v1/chat/completions
    "repl": SamplingParams(temperature=0.7),  # `river-cpp chat`
}


@dataclass(frozen=True)
class Decoding:
    """How a call decodes. policy: the exit policy of its forwards (never: every token
    is the backbone's own); speculative: the draft verified by the backbone (None:
    plain decoding); sampling: how each token is picked."""

    policy: ExitPolicy
    speculative: Optional[Speculative]
    sampling: SamplingParams

    @property
    def drafts(self) -> bool:
        """Whether drafts are verified by the backbone (the output is then the backbone's)."""
        return self.speculative is not None


def default_draft(has_river: bool, template: Optional[Speculative] = None) -> Speculative:
    """The draft of a model that drafts by default: the river and n-gram matches with
    a river, n-gram matches alone without one; `template`'s other settings."""
    return dataclasses.replace(template or Speculative(), draft=DEFAULT_DRAFT if has_river else "ngram")


def preset_decoding(
    preset: Preset = DEFAULT,
    *,
    has_river: bool,
    kind: str = "generate",
    template: Optional[Speculative] = None,
    sampling: Optional[SamplingParams] = None,
) -> Decoding:
    """What `preset` decodes with when nothing else is said (without a river: the
    backbone alone, drafted by n-gram matches when the preset drafts). `template`
    holds the settings of a draft (its `draft` is chosen here); `sampling` replaces
    the kind's defaults."""
    policy = preset.policy if has_river else ExitPolicy.never()
    draft = default_draft(has_river, template) if preset.speculative else None
    return Decoding(policy, draft, sampling if sampling is not None else sampling_defaults(kind))


def sampling_defaults(kind: str) -> SamplingParams:
    """The sampling defaults of an entry kind (SAMPLING_DEFAULTS); ValueError for others."""
    try:
        return SAMPLING_DEFAULTS[kind]
    except KeyError:
        raise ValueError(f"unknown entry kind {kind!r} (known: {', '.join(SAMPLING_DEFAULTS)})") from None


def check_alone(
    policy: Optional[ExitPolicy], speculative: SpeculativeOption, sampling: Optional[SamplingParams], options: dict
) -> None:
    """For a call given an already resolved Decoding: TypeError naming an option that
    is no sampling setting, ValueError when options it would override come beside it."""
    SamplingParams.of(None, **options)  # TypeError naming an unknown option
    if policy is not None or speculative is not None or sampling is not None or options:
        raise ValueError("give a decoding or its options (policy, speculative, sampling), not both")


def decide(
    defaults: Decoding,
    *,
    n_layer: int,
    has_river: bool,
    policy: Optional[ExitPolicy] = None,
    speculative: SpeculativeOption = None,
    draft: Optional[str] = None,
    template: Optional[Speculative] = None,
    sampling: Optional[SamplingParams] = None,
    **sampling_options: Any,
) -> Decoding:
    """The Decoding of a call given `defaults` (what nothing said means) and what it
    says, on a model of n_layer layers with or without a river (the rules are the
    module's). `template`: the settings of a draft built here (default: the
    defaults' draft's, else Speculative's); `sampling` and `sampling_options`
    replace the defaults' sampling. TypeError / ValueError for options that do not
    apply, naming what is wrong."""
    if policy is not None:
        check_policy(policy, n_layer=n_layer, has_river=has_river)
    lossy = policy is not None and policy.exits(n_layer)
    if speculative is None:
        chosen = None if lossy else defaults.speculative
    elif speculative is False:
        chosen = None
    elif speculative is True:
        settings = template or defaults.speculative or Speculative()
        chosen = dataclasses.replace(settings, draft=policy) if lossy else default_draft(has_river, settings)
    elif isinstance(speculative, Speculative):
        chosen = speculative
    else:
        raise TypeError(f"speculative must be a bool or a Speculative, got {type(speculative).__name__}")
    if draft is not None:
        if chosen is None:
            raise ValueError(
                f"the draft {draft!r} was named, but this decode does not draft: it is lossy (an exit "
                "option or the preset's) or plain; ask for drafting too (--speculative, speculative=True)"
            )
        chosen = dataclasses.replace(chosen, draft=draft)
    if chosen is not None and chosen.uses_river and not has_river:
        raise ValueError('drafting with the river needs a river: use Speculative(draft="ngram") or load one')
    return Decoding(
        defaults.policy if policy is None else policy,
        chosen,
        SamplingParams.of(defaults.sampling if sampling is None else sampling, **sampling_options),
    )
