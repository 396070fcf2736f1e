"""The eval comparison: its plan, River rows with their controls, llama.cpp rows, JSON."""

from __future__ import annotations

import numpy as np
import pytest
from test_corpus import CharTokenizer

from river_cpp import ExitPolicy, RiverModel
from river_cpp.engine.files.weight_bytes import WeightBytes
from river_cpp.measure.comparison import (
    FULL_RIVER,
    LLAMA,
    RANDOM,
    STATIC,
    VARIANT,
    VARIANTS,
    Comparison,
    Entry,
    Workload,
    divergence_prompts,
    forced_positions,
    plan,
    reference_run,
    run_comparison,
    sweep_group,
)
from river_cpp.measure.configs import RiverConfig, full_river, peer_name, river_at_tau
from river_cpp.measure.corpus import Document

pytestmark = pytest.mark.usefixtures("river_cache")

# On tiny_llama4 the block similarity at depth 2 sits around 0.7 (0.57 - 0.83 for most
# tokens), so this tau sends tokens out at depths 2, 3 and 4.
TAU = 0.75


def _workload(n_chunks: int = 3, prefix: int = 4, forced: int = 6) -> Workload:
    rng = np.random.default_rng(0)
    chunks = [[int(t) for t in rng.integers(100, 3000, prefix + forced + 1)] for _ in range(n_chunks)]
    return Workload(chunks, prefix, prompts=[chunks[0][:5], chunks[1][:3]], divergence_tokens=4)


def test_plan_orders_and_names_every_configuration():
    entries = plan(30, taus=[0.97, 0.98], signal_taus=[0.8], variant_tau=0.98)
    names = [e.config.name for e in entries]
    assert names == [
        "river tau=0.97",
        "river tau=0.98",
        "river tau=0.8 update_norm",
        "backbone prompt, river decode q4_0",
        "full river q4_0",
        "river tau=0.98 iq4_nl",
        "full river iq4_nl",
        "river tau=0.98 q8_0",
        "full river q8_0",
        "river tau=0.98 last 4 q8_0",
        "full river q4_0 last 4 q8_0",
        "river tau=0.98 head q8_0",
        "backbone prompt, river decode q4_0 head q8_0",
    ]
    assert [e.controls for e in entries[:3]] == [True] * 3 and not any(e.controls for e in entries[3:])
    assert entries[2].group == sweep_group("update_norm") != entries[0].group
    assert entries[2].config.policy.signal == "update_norm"
    assert dict(entries[9].config.river_types) == {26: "q8_0", 27: "q8_0", 28: "q8_0", 29: "q8_0"}
    assert entries[11].config.river_head == entries[12].config.river_head == "q8_0"
    assert entries[12].config.prefill == "backbone"
    assert [e.config.name for e in plan(30, taus=[0.9], signal_taus=[0.8], variants=[])] == [
        "river tau=0.9",
        "full river q4_0",
    ]
    # the variants' own baseline when the sweep lacks it; a model shorter than the mixed tail
    entries = plan(2, taus=[0.9], variant_tau=0.98, variants=["river_types", "head"])
    assert [(e.config.name, e.group) for e in entries[:3]] == [
        ("river tau=0.9", sweep_group("cosine")),
        ("full river q4_0", FULL_RIVER),
        ("river tau=0.98", VARIANT),
    ]
    assert "river tau=0.98 last 2 q8_0" in [e.config.name for e in entries]
    assert set(VARIANTS) == {"update_norm", "backbone_prompt", "river_types", "head"}
    with pytest.raises(ValueError, match="unknown variants"):
        plan(30, taus=[0.9], variants=["tail"])


def test_workload_checks_its_chunks():
    work = _workload()
    assert work.forced == 6 and work.n_ctx == 12
    with pytest.raises(ValueError, match="no chunks"):
        Workload([], 4, [], 4).check()
    with pytest.raises(ValueError, match="chunks must"):
        Workload([[1, 2, 3], [1, 2]], 1, [], 4).check()


def test_divergence_prompts_are_chats_or_chunk_prefixes():
    tokenizer = CharTokenizer()
    chats = [Document("c1", "hi", "chat", chat=True), Document("c2", "yo", "chat", chat=True)]
    prompts = divergence_prompts(tokenizer, chats + [Document("t", "text", "t")], [], prefix=2, n_prompts=1)
    assert prompts == [[1] + tokenizer.tokenize("<user>hi<assistant>", add_bos=False)]
    assert divergence_prompts(
        tokenizer, [Document("t", "text", "t")], [[1, 2, 3], [4, 5, 6]], prefix=2, n_prompts=5
    ) == [[1, 2], [4, 5]]


def test_forced_positions_take_the_depth_each_step_is_given(tiny_llama4):
    work = _workload(n_chunks=2)
    depths = np.array([[0, 4, 1, 3, 2, 2], [4, 4, 0, 0, 1, 3]])
    with RiverModel(tiny_llama4, n_ctx=work.n_ctx) as model:
        reference, _ = reference_run(model, work)

        def policy_for(c: int):
            return lambda i: ExitPolicy.never() if i == 0 else ExitPolicy.at_layer(int(depths[c, i - 1]))

        positions, exits = forced_positions(model, work, reference, policy_for=policy_for)
        same, never_exits = forced_positions(model, work, reference, policy_for=lambda c: ExitPolicy.never())
    assert list(exits) == list(depths.ravel())
    assert positions.kl.shape == (12,) and (positions.kl[exits < 4] > 0).all()
    assert (same.kl == 0).all() and (never_exits == 4).all()


@pytest.fixture(scope="module")
def comparison(tiny_llama4, tmp_path_factory) -> tuple[Comparison, list]:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(cache))
        entries = [
            Entry(RiverConfig("never", ExitPolicy.never()), VARIANT),
            Entry(river_at_tau(TAU, min_layer=2), sweep_group("cosine"), controls=True),
            Entry(full_river(), FULL_RIVER),
        ]
        seen = []
        result = run_comparison(
            tiny_llama4,
            entries,
            _workload(),
            ladder=["F16", "Q8_0"],
            n_threads=1,
            on_row=seen.append,
            corpus=["synthetic"],
        )
    return result, seen


def test_never_leaving_is_the_backbone_exactly(comparison):
    result, _ = comparison
    never = result.row("never")
    assert never.quality.mean_kl == 0 and never.quality.max_kl == 0 and never.quality.same_top1 == 1
    assert never.mean_exit_layer == 4 and never.tokens_until_divergence == 4
    assert never.bytes_per_token == result.backbone_bytes_per_token


def test_river_row_and_its_controls(comparison, tiny_llama4):
    result, _ = comparison
    river = result.row(f"river tau={TAU:g}")
    assert 2 < river.mean_exit_layer < 4 and river.quality.mean_kl > 0
    static = result.row(f"river tau={TAU:g}: static k={round(river.mean_exit_layer)}")
    assert static.group == STATIC and static.control_of == river.name
    assert static.mean_exit_layer == round(river.mean_exit_layer) and static.tokens_until_divergence is not None
    random = result.row(f"river tau={TAU:g}: random depths")
    # the same depths, dealt to other positions
    assert random.group == RANDOM and random.control_of == river.name
    assert random.mean_exit_layer == pytest.approx(river.mean_exit_layer)
    assert random.bytes_per_token == pytest.approx(river.bytes_per_token)
    assert random.quality.mean_kl != river.quality.mean_kl
    assert random.tokens_until_divergence is None
    full = result.row("full river q4_0")
    assert full.mean_exit_layer == 0 and full.bytes_per_token < river.bytes_per_token < result.backbone_bytes_per_token
    assert full.quality.mean_kl > 0
    for control in (static, random):  # paired over the same positions: the mean excess is the difference of means
        assert control.kl_excess == pytest.approx(control.quality.mean_kl - river.quality.mean_kl)
        assert control.kl_excess_se > 0
    assert river.kl_excess is None and full.kl_excess is None
    verdicts = result.verdicts()
    assert [line.split(":")[0] for line in verdicts] == [river.name] * 2
    assert "static control" in verdicts[0] and "random control" in verdicts[1]


def test_llama_cpp_rows(comparison, tiny_llama4):
    result, _ = comparison
    f16, q8 = result.row(peer_name("F16")), result.row(peer_name("Q8_0"))
    assert f16.group == q8.group == LLAMA and f16.mean_exit_layer is None
    assert f16.bytes_per_token == WeightBytes.of_files(tiny_llama4).full_backbone()
    assert q8.bytes_per_token < f16.bytes_per_token
    # llama.cpp on the backbone file computes what our backbone does, to float rounding
    assert f16.quality.mean_kl < 1e-4 and f16.quality.same_top1 == 1
    assert f16.quality.mean_kl < q8.quality.mean_kl


def test_rows_are_reported_as_measured_and_survive_json(comparison, tmp_path):
    result, seen = comparison
    assert [r.name for r in seen] == [r.name for r in result.rows] and len(seen) == 7
    path = tmp_path / "eval.json"
    result.save(path)
    assert Comparison.load(path) == result
    table = result.table()
    assert all(f"| {r.name} |" in table for r in result.rows)
    with pytest.raises(ValueError, match="not a river-cpp-eval"):
        Comparison.from_json('{"format": "other"}')
