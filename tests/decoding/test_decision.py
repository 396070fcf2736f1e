"""river_cpp.decoding.decision: the one function that says how a call decodes, on
values alone (no model): defaults, lossy policies, drafting asked or refused, a named
draft, a model without a river, and the sampling tables."""

from __future__ import annotations

import pytest

from river_cpp.decoding.decision import (
    SAMPLING_DEFAULTS,
    Decoding,
    decide,
    default_draft,
    preset_decoding,
    sampling_defaults,
)
from river_cpp.decoding.presets import FAST, LOSSLESS, PAPER
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import Speculative
from river_cpp.engine.compute.policy import ExitPolicy

N_LAYER = 4
NEVER = ExitPolicy.never()
TAU = ExitPolicy.uniform(0.9, min_layer=2)
LIBRARY = preset_decoding(LOSSLESS, has_river=True)


def test_the_library_defaults_draft_losslessly():
    assert LIBRARY == Decoding(NEVER, Speculative(), SamplingParams())
    assert preset_decoding(LOSSLESS, has_river=False).speculative == Speculative(draft="ngram")


@pytest.mark.parametrize("preset", [FAST, PAPER])
def test_lossy_presets_decode_plainly_under_their_policy(preset):
    assert preset_decoding(preset, has_river=True) == Decoding(preset.policy, None, SamplingParams())
    # without a river the backbone alone, plainly
    assert preset_decoding(preset, has_river=False) == Decoding(NEVER, None, SamplingParams())


def test_nothing_said_keeps_the_defaults():
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True) == LIBRARY


def test_a_policy_that_exits_decodes_plainly_under_it():
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True, policy=TAU) == Decoding(TAU, None, SamplingParams())


def test_a_policy_that_never_exits_keeps_the_defaults_draft():
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True, policy=NEVER).speculative == Speculative()
    lossy = Decoding(TAU, None, SamplingParams())
    assert decide(lossy, n_layer=N_LAYER, has_river=True, policy=NEVER) == Decoding(NEVER, None, SamplingParams())


def test_speculative_false_true_and_a_draft():
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True, speculative=False).speculative is None
    lossy = Decoding(TAU, None, SamplingParams())
    # True: the default draft of what the model has; with a policy that exits, its exits draft
    assert decide(lossy, n_layer=N_LAYER, has_river=True, speculative=True).speculative == Speculative()
    assert decide(lossy, n_layer=N_LAYER, has_river=False, policy=NEVER, speculative=True).speculative == (
        Speculative(draft="ngram")
    )
    drafted = decide(LIBRARY, n_layer=N_LAYER, has_river=True, policy=TAU, speculative=True)
    assert drafted == Decoding(TAU, Speculative(draft=TAU), SamplingParams())
    mine = Speculative(draft="ngram", max_draft=3)
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True, speculative=mine).speculative is mine


def test_true_builds_with_the_template_or_the_defaults_settings():
    defaults = Decoding(NEVER, Speculative(max_draft=3), SamplingParams())
    built = decide(defaults, n_layer=N_LAYER, has_river=False, speculative=True)
    assert built.speculative == Speculative(draft="ngram", max_draft=3)
    template = Speculative(p_min=0.0)
    built = decide(defaults, n_layer=N_LAYER, has_river=True, speculative=True, template=template)
    assert built.speculative == Speculative(p_min=0.0)


def test_a_named_draft_replaces_the_draft_of_a_decode_that_drafts():
    assert decide(LIBRARY, n_layer=N_LAYER, has_river=True, draft="ngram").speculative == Speculative(draft="ngram")
    with pytest.raises(ValueError, match="does not draft"):
        decide(LIBRARY, n_layer=N_LAYER, has_river=True, policy=TAU, draft="ngram")
    with pytest.raises(ValueError, match="does not draft"):
        decide(LIBRARY, n_layer=N_LAYER, has_river=True, speculative=False, draft="river")


@pytest.mark.parametrize(
    "options",
    [
        dict(policy=TAU),
        dict(speculative=Speculative(draft="river")),
        dict(speculative=Speculative()),
        dict(draft="river+ngram"),
    ],
)
def test_without_a_river_exits_and_river_drafts_are_refused(options):
    defaults = preset_decoding(LOSSLESS, has_river=False)
    with pytest.raises(ValueError, match="river"):
        decide(defaults, n_layer=N_LAYER, has_river=False, **options)


@pytest.mark.parametrize("options, error", [(dict(policy=0.9), TypeError), (dict(speculative="yes"), TypeError)])
def test_options_of_the_wrong_type(options, error):
    with pytest.raises(error):
        decide(LIBRARY, n_layer=N_LAYER, has_river=True, **options)


def test_a_policy_deeper_than_the_model_is_refused():
    with pytest.raises(ValueError, match="layers"):
        decide(LIBRARY, n_layer=N_LAYER, has_river=True, policy=ExitPolicy.at_layer(N_LAYER + 1))


def test_sampling_replaces_the_defaults_one_setting_at_a_time():
    defaults = preset_decoding(LOSSLESS, has_river=True, kind="chat")
    assert defaults.sampling.temperature == 0.2
    decided = decide(defaults, n_layer=N_LAYER, has_river=True, top_k=3)
    assert decided.sampling == SamplingParams(temperature=0.2, top_k=3)
    given = SamplingParams(temperature=1.0)
    assert decide(defaults, n_layer=N_LAYER, has_river=True, sampling=given).sampling is given
    with pytest.raises(TypeError, match="unknown"):
        decide(defaults, n_layer=N_LAYER, has_river=True, temprature=0.5)


def test_one_sampling_table_per_entry_kind():
    # llama-cpp-python's create_completion (0.8) and create_chat_completion (0.2); generate is greedy
    assert {kind: s.temperature for kind, s in SAMPLING_DEFAULTS.items()} == {
        "generate": 0.0,
        "completion": 0.8,
        "chat": 0.2,
        "repl": 0.7,
    }
    with pytest.raises(ValueError, match="entry kind"):
        sampling_defaults("server")


def test_default_draft_keeps_the_templates_settings():
    assert default_draft(True, Speculative(draft="ngram", max_draft=2)) == Speculative(max_draft=2)
    assert default_draft(False) == Speculative(draft="ngram")
