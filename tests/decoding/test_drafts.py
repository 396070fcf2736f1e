"""river_cpp.decoding.drafts: a river round copies an n-gram match midway, an unsure token ends a
round, and a separate draft catches its cache up apart from its drafted tokens, on
stand-in models whose every forward predicts one fixed token."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from river_cpp.decoding.drafts import ModelDraft, NgramDraft, RiverDraft
from river_cpp.decoding.sampling import Sampler, SamplingParams
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.requests import run_alone

N_VOCAB = 16


class _OneTokenModel:
    """A model (with a river) whose every forward predicts `token` (with the logit
    `logit` against 0 for every other id); it records what each forward fed it, and
    takes `catch_up_sleep` seconds over any forward of several tokens."""

    has_river = True
    n_vocab = N_VOCAB

    def __init__(self, token: int, n_past: int = 0, catch_up_sleep: float = 0.0, logit: float = 10.0) -> None:
        self.token = token
        self.logit = logit
        self.n_past = n_past
        self.catch_up_sleep = catch_up_sleep
        self.fed: list[list[int]] = []

    def forward(
        self, ids: Sequence[int], last_only: bool, route: str, policy=None, exit_vocab=None, prompt=False
    ) -> np.ndarray:
        self.fed.append(list(ids))
        self.n_past += len(ids)
        if len(ids) > 1:
            time.sleep(self.catch_up_sleep)
        logits = np.zeros((1, N_VOCAB), dtype=np.float32)
        logits[0, self.token] = self.logit
        return logits

    def rewind(self, n: int) -> None:
        self.n_past = n


def _draft(history: list[int], token: int, k: int, copy_pays=None):
    model = _OneTokenModel(token, n_past=len(history) - 1)  # the last accepted token is not in the cache yet
    ngrams = NgramDraft(1, 3)
    ngrams.begin(history)
    river = RiverDraft(model, ExitPolicy.at_layer(0), None, copies=ngrams, copy_pays=copy_pays)
    return run_alone(model, river.propose(history, k, Sampler(SamplingParams(temperature=0.0)), 0.0)), model


def test_a_river_round_copies_a_match_it_reaches():
    # After the river's 2, the draft ends with (1, 2), which the context continued with 3, 4, 1.
    proposal, _ = _draft([1, 2, 3, 4, 1], token=2, k=4)
    assert proposal.tokens == [2, 3, 4, 1]
    assert proposal.spans == [("river", 1), ("copy2", 3)]
    assert proposal.forwards == 1
    # A longer round: the copy runs into the present and repeats the span (2, 3, 4, 1).
    proposal, model = _draft([1, 2, 3, 4, 1], token=2, k=7)
    assert proposal.tokens == [2, 3, 4, 1, 2, 3, 4]
    assert proposal.spans == [("river", 1), ("copy2", 6)]
    assert model.fed == [[1]]  # one forward: the copy needs none


def test_a_copy_that_does_not_pay_is_drafted_by_the_river():
    asked = []

    def never(name: str, n: int) -> bool:
        asked.append((name, n))
        return False

    proposal, _ = _draft([1, 2, 3, 4, 1], token=2, k=3, copy_pays=never)
    assert proposal.tokens == [2, 2, 2]
    assert proposal.spans == [("river", 3)]
    assert asked[0] == ("copy2", 2)  # the match, at most the round's remaining length


def test_the_first_token_is_the_chosen_sources():
    # The context ends with a match (1 -> 2), but the round was given to the river.
    proposal, _ = _draft([1, 2, 3, 1], token=5, k=1)
    assert proposal.spans == [("river", 1)]


def test_an_unsure_token_ends_the_round_and_is_still_proposed():
    greedy = Sampler(SamplingParams(temperature=0.0))
    # Top probability e / (e + 15) = 0.15: below p_min, so the first token ends the round.
    unsure = _OneTokenModel(token=5, n_past=3, logit=1.0)
    proposal = run_alone(unsure, RiverDraft(unsure, ExitPolicy.at_layer(0), None).propose([1, 2, 3, 4], 4, greedy, 0.5))
    assert proposal.tokens == [5] and proposal.forwards == 1
    # The same model drafts the whole length where nothing is asked of its confidence ...
    unsure = _OneTokenModel(token=5, n_past=3, logit=1.0)
    proposal = run_alone(unsure, RiverDraft(unsure, ExitPolicy.at_layer(0), None).propose([1, 2, 3, 4], 4, greedy, 0.0))
    assert proposal.tokens == [5] * 4
    # ... and a sure one (top probability 0.9993) under p_min too.
    sure = _OneTokenModel(token=5, n_past=3)
    proposal = run_alone(sure, RiverDraft(sure, ExitPolicy.at_layer(0), None).propose([1, 2, 3, 4], 4, greedy, 0.5))
    assert proposal.tokens == [5] * 4 and proposal.forwards == 4


def test_a_separate_draft_catches_up_apart_from_its_drafted_tokens():
    # The draft's cache ends 4 tokens before the history's last (plain rounds since its last draft).
    history = [1, 2, 3, 4, 5, 6, 7, 8]
    draft = _OneTokenModel(token=9, n_past=3, catch_up_sleep=0.02)
    source = ModelDraft(_OneTokenModel(token=0), draft)
    proposal = run_alone(draft, source.propose(history, 2, Sampler(SamplingParams(temperature=0.0)), 0.0))
    assert proposal.tokens == [9, 9]
    assert draft.fed == [[4, 5, 6, 7], [8], [9]]  # the catch-up, then one token per drafted one
    assert proposal.forwards == 2  # the catch-up is not a drafted token's forward
    assert proposal.catch_up_seconds >= 0.02


def test_a_separate_draft_in_step_with_the_history_catches_up_nothing():
    draft = _OneTokenModel(token=9, n_past=7)
    source = ModelDraft(_OneTokenModel(token=0), draft)
    proposal = run_alone(
        draft, source.propose([1, 2, 3, 4, 5, 6, 7, 8], 1, Sampler(SamplingParams(temperature=0.0)), 0.0)
    )
    assert draft.fed == [[8]]
    assert proposal.forwards == 1
