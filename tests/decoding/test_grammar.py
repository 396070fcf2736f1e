"""river_cpp.decoding.grammar: llama.cpp's grammar engine on the demo vocabulary:
compile errors named, legal tokens, no abort on a forbidden token, schemas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from river_cpp.decoding.grammar import Grammar, GrammarError, json_grammar, schema_grammar
from river_cpp.engine.compute.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer(demo_model: Path) -> Tokenizer:
    tokenizer = Tokenizer(str(demo_model))
    yield tokenizer
    tokenizer.close()


def compile(tokenizer: Tokenizer, gbnf: str, root: str = "root") -> Grammar:
    return Grammar(tokenizer, gbnf, root)


def legal_pieces(tokenizer: Tokenizer, state) -> set[str]:
    legal = np.flatnonzero(state.allowed(np.arange(tokenizer.n_vocab)))
    return {tokenizer.detokenize([int(t)]) for t in legal if not tokenizer.is_end_of_generation(int(t))}


def test_only_what_the_grammar_allows(tokenizer):
    state = compile(tokenizer, 'root ::= "yes" | "no"').start()
    pieces = legal_pieces(tokenizer, state)
    assert pieces and all("yes".startswith(p) or "no".startswith(p) for p in pieces)
    state.accept(tokenizer.tokenize("yes", add_bos=False)[0])
    eog = np.array([tokenizer.eos_id])
    assert state.allowed(eog)[0] == (tokenizer.detokenize(tokenizer.tokenize("yes", add_bos=False)[:1]) == "yes")


def test_clones_are_independent(tokenizer):
    state = compile(tokenizer, 'root ::= "ab" | "cd"').start()
    a = tokenizer.tokenize("a", add_bos=False)[0]
    branch = state.clone()
    branch.accept(a)
    assert state.allows(a) and not branch.allows(a)


def test_a_forbidden_token_is_an_error_not_an_abort(tokenizer):
    state = compile(tokenizer, 'root ::= "x"').start()
    with pytest.raises(ValueError, match="does not allow"):
        state.accept(tokenizer.tokenize("y", add_bos=False)[0])
    with pytest.raises(ValueError, match="does not allow"):
        state.accept(tokenizer.eos_id)  # llama.cpp aborts on an end-of-generation token the grammar forbids
    with pytest.raises(ValueError, match="vocabulary"):
        state.allowed(np.array([tokenizer.n_vocab]))
    state.accept(tokenizer.tokenize("x", add_bos=False)[0])  # still usable


def brute_force_forced(tokenizer: Tokenizer, state):
    legal = np.flatnonzero(state.allowed(np.arange(tokenizer.n_vocab)))
    return int(legal[0]) if legal.size == 1 else None


@pytest.mark.parametrize(
    "gbnf",
    [
        'root ::= "<tool_call>\\n" [a-z]+ "\\n</tool_call>"',
        'root ::= "\\u00e9t\\u00e9" | "x"',  # a two-byte character
        schema_grammar({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
        'root ::= "a" "\\x00"',  # nothing after "a"
    ],
)
def test_forced_agrees_with_asking_about_every_token(tokenizer, gbnf):
    state = compile(tokenizer, gbnf).start()
    rng = np.random.default_rng(0)
    n_forced = 0
    for _ in range(24):
        expected = brute_force_forced(tokenizer, state)
        assert state.forced() == expected
        n_forced += expected is not None
        legal = np.flatnonzero(state.allowed(np.arange(tokenizer.n_vocab)))
        legal = [t for t in legal if not tokenizer.is_end_of_generation(int(t))]
        if not legal:
            break
        state.accept(int(rng.choice(legal)))
    if gbnf.startswith('root ::= "<tool_call>'):
        assert n_forced > 0  # "\n" after the tag, for one


@pytest.mark.parametrize(
    "gbnf, reason",
    [
        ("root ::= undefined-rule", "Undefined rule identifier 'undefined-rule'"),
        ('root ::= "unterminated', "unexpected end of input"),
        ("root ::= root", "cannot compile"),  # left recursion
        ("", "empty"),
        ('other ::= "x"', "cannot compile"),  # no root
    ],
)
def test_a_grammar_that_does_not_compile_is_named(tokenizer, gbnf, reason):
    with pytest.raises(GrammarError, match=reason):
        compile(tokenizer, gbnf)
    compile(tokenizer, 'root ::= "ok"').start()  # the vocabulary is still usable


def test_schemas_become_grammars(tokenizer):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    state = compile(tokenizer, schema_grammar(schema)).start()
    assert legal_pieces(tokenizer, state) <= {"{", '{"', "{\n", "{\n\n", " {"} | {p for p in ["{"]}
    compile(tokenizer, json_grammar()).start()


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/definitions/missing"},
        {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/x.json"}}},
        "not a schema",
    ],
)
def test_a_schema_that_cannot_be_converted_is_named(schema):
    with pytest.raises(GrammarError, match="schema"):
        schema_grammar(schema)


def test_a_recursive_schema_compiles_or_is_named(tokenizer):
    node = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    tree = {"$defs": {"node": node}, "type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}}
    compile(tokenizer, schema_grammar(tree)).start()  # recursion through $defs is a recursive rule
    with pytest.raises(GrammarError, match="schema"):
        schema_grammar({"type": "object", "properties": {"self": {"$ref": "#"}}})  # the converter refuses "#"
