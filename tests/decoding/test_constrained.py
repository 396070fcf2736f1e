"""Grammar-constrained decoding (river_cpp.decoding.grammar in generation's two loops):
drafted output is the plain constrained decode's, greedy and sampled; a grammar's
dead end stops both loops with the same finish reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from river_cpp import RiverModel, Speculative
from river_cpp.decoding.drafts import Proposal
from river_cpp.decoding.generation import NO_LEGAL_TOKEN
from river_cpp.decoding.grammar import Grammar, schema_grammar
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative import _grammar_states

N_CTX = 256
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"enum": [1, 2, 3]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 6},
    },
    "required": ["ok", "n", "tags"],
}
DRAFTS = [Speculative(), Speculative(draft="ngram"), Speculative(draft="river", adaptive=False, max_draft=4)]


@pytest.fixture(scope="module")
def model(tiny_llama: Path, tmp_path_factory) -> RiverModel:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with RiverModel(tiny_llama, n_ctx=N_CTX, n_threads=1, river="q4_0", progress=False) as model:
            yield model


def grammar(model: RiverModel, gbnf: str) -> Grammar:
    return Grammar(model.tokenizer, gbnf)


def run(model, gbnf, speculative, **options):
    model.reset()
    return model.generate(
        "Answer in JSON: ", max_tokens=48, grammar=grammar(model, gbnf), speculative=speculative, **options
    )


@pytest.mark.parametrize("spec", DRAFTS, ids=["river+ngram", "ngram", "river"])
def test_drafted_greedy_is_the_plain_constrained_decode(model, spec):
    gbnf = schema_grammar(SCHEMA)
    plain = run(model, gbnf, False)
    drafted = run(model, gbnf, spec)
    assert drafted.token_ids == plain.token_ids
    if not spec.adaptive:  # the river drafts what the grammar allows: most of it is kept
        assert drafted.speculative.accepted > len(drafted.token_ids) // 2
    if plain.finish_reason == "stop":
        value = json.loads(plain.text)
        assert set(value) == {"ok", "n", "tags"} and value["n"] in (1, 2, 3)


@pytest.mark.parametrize("spec", DRAFTS, ids=["river+ngram", "ngram", "river"])
@pytest.mark.parametrize("seed", [1, 2])
def test_drafted_sampling_is_the_plain_constrained_draw(model, spec, seed):
    gbnf = 'root ::= ("ab" | "ba" | [a-c] | " ")+ "."'
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
    plain = run(model, gbnf, False, sampling=sampling)
    drafted = run(model, gbnf, spec, sampling=sampling)
    assert drafted.token_ids == plain.token_ids
    assert set(plain.text) <= set("abc .")


@pytest.mark.parametrize("spec", [False, *DRAFTS], ids=["plain", "river+ngram", "ngram", "river"])
def test_a_dead_end_stops_with_its_finish_reason(model, spec):
    result = run(model, 'root ::= "a" "\\x00"', spec)  # nothing can follow "a": no piece starts with a NUL byte
    assert result.finish_reason == NO_LEGAL_TOKEN
    assert result.text == "a"
    assert model.generate("Hello", max_tokens=3).token_ids  # the model stays usable


def test_a_forbidden_draft_ends_the_draft_before_the_verify(model):
    state = grammar(model, 'root ::= "ab"').start()
    tokens = model.tokenize("abba", add_bos=False)
    a = model.tokenize("a", add_bos=False)
    proposal = Proposal(list(a) + tokens, "ngram3")
    states = _grammar_states(state, proposal.tokens)
    proposal.keep_first(len(states) - 1)
    assert proposal.tokens == list(a) and proposal.spans == [("ngram3", 1)]
    assert len(states) == 2 and states[1].allows(model.tokenize("b", add_bos=False)[0])


@pytest.mark.parametrize("seed", [None, 5])
def test_tokens_the_grammar_forces_come_free_and_exact(model, seed):
    gbnf = 'root ::= "<tool_call>\\n{" [a-z]{1,6} "}\\n</tool_call>"'
    sampling = SamplingParams(temperature=0.0 if seed is None else 1.0, seed=seed)
    plain = run(model, gbnf, False, sampling=sampling)
    drafted = run(model, gbnf, Speculative(draft="ngram"), sampling=sampling)
    assert drafted.token_ids == plain.token_ids
    assert drafted.text.startswith("<tool_call>\n{")
    assert drafted.speculative.forced > 0
    assert drafted.speculative.rounds < len(drafted.token_ids)
