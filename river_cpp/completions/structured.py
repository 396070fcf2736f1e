"""Structured output: a request's `grammar` or `response_format` as a compiled Grammar.

The OpenAI and llama-cpp-python shapes of a request for JSON (a JSON object, one
matching a schema) and llama-cpp-python's LlamaGrammar become one Grammar on the
model's vocabulary (river_cpp.decoding.grammar: llama.cpp's grammar engine); a bad one
is a ValueError (GrammarError) naming the problem, before anything runs.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from river_cpp.completions.shared import CompletionModel
from river_cpp.decoding.grammar import Grammar, GrammarError, json_grammar, schema_grammar

RESPONSE_FORMATS = ("text", "json_object", "json_schema")


def response_format_grammar(response_format: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The GBNF `response_format` asks for (None: free text).

    {"type": "text"}; {"type": "json_object"} (any JSON object); {"type": "json_object",
    "schema": S} (llama-cpp-python's form) and {"type": "json_schema", "json_schema":
    {"schema": S, ...}} (OpenAI's): JSON matching the schema S.
    """
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise GrammarError("response_format must be an object")
    kind = response_format.get("type")
    if kind not in RESPONSE_FORMATS:
        raise GrammarError(f"response_format.type must be one of {', '.join(RESPONSE_FORMATS)}, got {kind!r}")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return json_grammar() if schema is None else schema_grammar(schema)
    spec = response_format.get("json_schema")
    if not isinstance(spec, Mapping) or "schema" not in spec:
        raise GrammarError('response_format json_schema needs {"json_schema": {"schema": {...}}}')
    return schema_grammar(spec["schema"])


def gbnf_of(grammar: Any) -> Optional[tuple[str, str]]:
    """(GBNF text, root rule) of a `grammar` option: llama-cpp-python's LlamaGrammar,
    GBNF text, or None."""
    if grammar is None:
        return None
    if isinstance(grammar, str):
        return grammar, "root"
    text, root = getattr(grammar, "_grammar", None), getattr(grammar, "_root", "root")
    if isinstance(text, str) and isinstance(root, str):
        return text, root  # llama_cpp.LlamaGrammar keeps its GBNF there
    raise GrammarError(f"grammar must be a llama_cpp.LlamaGrammar or GBNF text, got {type(grammar).__name__}")


def request_grammar(
    model: CompletionModel, *, grammar: Any = None, response_format: Optional[Mapping[str, Any]] = None
) -> Optional[Grammar]:
    """The compiled Grammar of a request's `grammar` and `response_format` (at most one
    of them constrains), or None; GrammarError naming what is wrong."""
    if isinstance(grammar, Grammar):
        source = None
    else:
        source = gbnf_of(grammar)
    from_format = response_format_grammar(response_format)
    if (grammar is not None) and from_format is not None:
        raise GrammarError("give either grammar or a JSON response_format, not both")
    if isinstance(grammar, Grammar):
        return grammar
    if from_format is not None:
        source = (from_format, "root")
    if source is None:
        return None
    return Grammar(model.tokenizer, source[0], source[1])
