"""ExitPolicy: every constructor resolves to per-depth thresholds."""

from __future__ import annotations

import math

import pytest

from river_cpp import ExitPolicy, RiverModel

INF = math.inf


def test_never():
    assert ExitPolicy.never().resolve(3) == [INF, INF, INF]


def test_at_layer():
    assert ExitPolicy.at_layer(0).resolve(3) == [-INF, INF, INF]
    assert ExitPolicy.at_layer(2).resolve(3) == [INF, INF, -INF]
    assert ExitPolicy.at_layer(3).resolve(3) == [INF, INF, INF]  # the full backbone
    with pytest.raises(ValueError, match="4 layers"):
        ExitPolicy.at_layer(6).resolve(4)


def test_uniform_with_bounds():
    assert ExitPolicy.uniform(0.9).resolve(4) == [INF, 0.9, 0.9, 0.9]
    assert ExitPolicy.uniform(0.9, min_layer=2).resolve(4) == [INF, INF, 0.9, 0.9]
    assert ExitPolicy.uniform(0.9, min_layer=1, max_layer=2).resolve(5) == [INF, 0.9, 0.9, INF, INF]


def test_explicit_thresholds_pad_with_beyond():
    assert ExitPolicy((INF, 0.5), beyond=0.7).resolve(4) == [INF, 0.5, 0.7, 0.7]


@pytest.mark.parametrize(
    "make",
    [
        lambda: ExitPolicy.at_layer(-1),
        lambda: ExitPolicy.at_layer(1.5),
        lambda: ExitPolicy.uniform(float("nan")),
        lambda: ExitPolicy.uniform("high"),
        lambda: ExitPolicy.uniform(0.9, min_layer=3, max_layer=2),
        lambda: ExitPolicy((0.5, float("nan"))),
    ],
)
def test_nonsense_raises(make):
    with pytest.raises(ValueError):
        make()


def test_model_without_river_accepts_only_never(tiny_llama):
    RiverModel(tiny_llama, river=None, policy=ExitPolicy.never()).close()
    with pytest.raises(ValueError, match="no river"):
        RiverModel(tiny_llama, river=None, policy=ExitPolicy.at_layer(1))
    with pytest.raises(TypeError):
        RiverModel(tiny_llama, river=None, policy=0.9)
    with RiverModel(tiny_llama, river=None) as model:
        with pytest.raises(ValueError, match="no river"):
            model.generate([1, 2], max_tokens=1, policy=ExitPolicy.at_layer(1))
        with pytest.raises(ValueError, match="no river"):
            model.forward([1, 2], policy=ExitPolicy.at_layer(1))


def test_a_models_defaults_are_read_only(tiny_llama):
    with RiverModel(tiny_llama, river=None) as model:
        for name, value in (("policy", ExitPolicy.never()), ("speculative", None), ("prefill", "exit")):
            with pytest.raises(AttributeError):
                setattr(model, name, value)


def test_signal_is_part_of_the_policy():
    assert ExitPolicy.uniform(0.9).signal == "cosine"
    assert ExitPolicy.uniform(0.9, signal="update_norm").signal == "update_norm"
    with pytest.raises(ValueError, match="signal"):
        ExitPolicy.uniform(0.9, signal="entropy")


def test_policy_file_round_trip(tmp_path):
    policy = ExitPolicy((math.inf, math.inf, 0.97, -math.inf, 0.995), beyond=0.99, signal="update_norm")
    path = tmp_path / "policy.json"
    policy.save(path, model="m.gguf", held_out_top1=0.97)
    assert ExitPolicy.load(path) == policy
    assert '"inf"' in path.read_text()


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "invalid JSON"),
        ("[]", "format"),
        ('{"format": "river-cpp-policy/1"}', "list of thresholds"),
        ('{"format": "river-cpp-policy/1", "thresholds": ["high"]}', "threshold"),
        ('{"format": "river-cpp-policy/1", "thresholds": [], "signal": "x"}', "signal"),
    ],
)
def test_bad_policy_files(text, message):
    with pytest.raises(ValueError, match=message):
        ExitPolicy.from_json(text)
