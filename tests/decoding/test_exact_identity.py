"""Drafted decoding is plain decoding, token for token, on quantized releases: the
0.5B Q4_K_M release and a Q8_0 copy of it, greedy over input-grounded and chat prompts,
seeded sampling, and a JSON-schema constrained decode (the engine's exact rows,
csrc/exact_ops.*; tests/engine/test_exact.py checks the rows themselves).

The engine runs as users get it: our own products (csrc/own_*) take the Q4_K, Q6_K and
Q8_0 matrices, so nothing is left for the CPU's repacked layouts, whose batched GEMM
differs from their GEMV. Where our products' probe failed on a host, the repacked layouts
are turned off instead (RIVER_CPP_EXTRA_BUFTS=none); exact="bitwise" keeps the backbone
out of them whatever the host allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from river_cpp import RiverModel
from river_cpp.decoding.grammar import Grammar, schema_grammar
from river_cpp.engine.files.cache import models_dir
from river_cpp.engine.files.convert import convert
from river_cpp.engine.probes.own_products import own_products

from river_bench.prompts import prompt_set

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

RELEASE = "Qwen2.5-Coder-0.5B-Instruct.gguf"
N_TOKENS = 128
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "year": {"type": "integer"}, "tags": {"type": "array"}},
    "required": ["name", "year", "tags"],
}


@pytest.fixture(scope="module")
def release() -> Path:
    path = models_dir() / RELEASE
    if not path.is_file():
        pytest.skip(f"{RELEASE} is not in {models_dir()}: run python scripts/fetch_models.py qwen05")
    return path


@pytest.fixture(scope="module", params=["release", "q8_0"])
def model(request, release, tmp_path_factory) -> RiverModel:
    path = release
    if request.param == "q8_0":
        path = convert(release, tmp_path_factory.mktemp("q8_0") / "qwen05-q8_0.gguf", type="q8_0", progress=False)
    with pytest.MonkeyPatch.context() as patch:
        if not own_products().types:
            patch.setenv("RIVER_CPP_EXTRA_BUFTS", "none")
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(path, n_ctx=2048, n_threads=2, river=None, progress=False) as model:
            yield model


def plain_and_drafted(model: RiverModel, prompt: str, **options):
    model.reset()
    plain = model.generate(prompt, max_tokens=N_TOKENS, speculative=False, **options)
    model.reset()
    drafted = model.generate(prompt, max_tokens=N_TOKENS, **options)
    return plain, drafted


@pytest.mark.parametrize("kind", ["grounded", "chat"])
def test_greedy_default_is_plain_decoding(model, kind):
    drafted_tokens = 0
    for prompt in prompt_set(model.tokenizer, kind, 2):
        plain, drafted = plain_and_drafted(model, prompt)
        assert len(plain.token_ids) >= min(N_TOKENS, 32)
        assert drafted.token_ids == plain.token_ids
        drafted_tokens += drafted.speculative.drafted
    assert drafted_tokens > 0  # verifies of several rows ran


def test_seeded_sampling_default_is_plain_decoding(model):
    prompt = prompt_set(model.tokenizer, "grounded", 1)[0]
    plain, drafted = plain_and_drafted(model, prompt, temperature=0.8, top_p=0.95, seed=7)
    assert drafted.token_ids == plain.token_ids
    assert drafted.speculative.drafted > 0


def test_schema_constrained_drafted_is_plain(model):
    prompt = model.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Describe the Python language as JSON with its name, first year and tags."}]
    )
    gbnf = schema_grammar(SCHEMA)
    model.reset()
    plain = model.generate(prompt, max_tokens=N_TOKENS, grammar=Grammar(model.tokenizer, gbnf), speculative=False)
    model.reset()
    drafted = model.generate(prompt, max_tokens=N_TOKENS, grammar=Grammar(model.tokenizer, gbnf))
    assert drafted.token_ids == plain.token_ids
    assert drafted.text.lstrip().startswith("{")


def test_bitwise_is_plain_decoding_with_the_hosts_layouts(release):
    """exact="bitwise" with the extra buffer types the host allows (CPU_REPACK where it
    works): the backbone is not repacked, so its answers are plain decoding's too."""
    with RiverModel(release, n_ctx=2048, n_threads=2, river=None, progress=False, exact="bitwise") as model:
        plain, drafted = plain_and_drafted(model, prompt_set(model.tokenizer, "grounded", 1)[0])
        assert drafted.token_ids == plain.token_ids and drafted.speculative.drafted > 0
        assert model.engine.repacked_tensors == 0
