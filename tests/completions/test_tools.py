"""river_cpp.completions.tools: checking tools, the call grammars, parsing calls (no model)."""

from __future__ import annotations

import json

import pytest

from river_cpp.completions.tools import ToolCallStream, call_grammar, call_syntax, check_tools, parse_tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK = {"type": "function", "function": {"name": "now"}}  # no parameters: a call takes none


def test_tool_choices():
    assert check_tools(None, None) is None
    assert check_tools([WEATHER], None).choice == "auto"
    assert not check_tools([WEATHER], "none").parsed
    named = check_tools([WEATHER, CLOCK], {"type": "function", "function": {"name": "now"}})
    assert named.choice == "named" and named.named == "now" and named.constrained
    assert named.tools[1]["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    "tools, choice, message",
    [
        ([], None, "non-empty"),
        ([{"type": "function"}], None, r"tools\[0\]"),
        ([{"type": "function", "function": {"name": "a b"}}], None, "name"),
        ([WEATHER, WEATHER], None, "two tools"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}], None, "object"),
        ([WEATHER], {"type": "function", "function": {"name": "other"}}, "not one of the tools"),
        ([WEATHER], "sometimes", "tool_choice"),
        (None, "required", "needs tools"),
    ],
)
def test_bad_tools_are_named(tools, choice, message):
    with pytest.raises(ValueError, match=message):
        check_tools(tools, choice)


def test_call_syntax_from_the_template():
    assert call_syntax("... <tool_call> ... {{ tools }}") == "hermes"
    assert call_syntax("{{ tools }} ipython ... parameters") == "llama3"
    with pytest.raises(ValueError, match="syntax"):
        call_syntax("{{ tools }}")


def test_hermes_calls_parse_into_openai_tool_calls():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    content, calls = parse_tool_calls("hermes", text)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert parse_tool_calls("hermes", "<tool_call>\nnot json\n</tool_call>") == (
        "<tool_call>\nnot json\n</tool_call>",
        [],
    )
    content, calls = parse_tool_calls("llama3", '<|python_tag|>{"name": "now", "parameters": {}}')
    assert content is None and calls[0]["function"]["arguments"] == "{}"
    assert parse_tool_calls("llama3", "Hello") == ("Hello", [])


def test_streamed_text_holds_back_what_may_be_a_call():
    stream = ToolCallStream("hermes")
    pieces = ["Sure", ". <tool", '_call>\n{"name": "now", ', '"arguments": {}}\n</tool_call>']
    shown = "".join(stream.push(p) for p in pieces)
    assert shown == "Sure. "
    rest, calls = stream.finish()
    assert rest == "" and calls[0]["function"]["name"] == "now"
    plain = ToolCallStream("hermes")
    assert "".join(plain.push(p) for p in ["a <", "b"]) == "a <b"
    assert plain.finish() == ("", [])


def test_the_call_grammar_names_the_function():
    request = check_tools([WEATHER, CLOCK], {"type": "function", "function": {"name": "get_weather"}})
    gbnf, root = call_grammar("hermes", request)
    assert root == "tool-call" and "get_weather" in gbnf and "now" not in gbnf.replace("tool-call", "")
    gbnf, root = call_grammar("llama3", check_tools([WEATHER, CLOCK], "required"))
    assert root == "root" and "get_weather" in gbnf and '\\"now\\"' in gbnf


def test_a_template_without_a_tool_syntax_forces_bare_json_calls():
    from river_cpp.completions.tools import known_call_syntax

    assert known_call_syntax("{{ messages }}") is None and known_call_syntax("<tool_call>") == "hermes"
    named = check_tools([WEATHER, CLOCK], {"type": "function", "function": {"name": "get_weather"}})
    gbnf, root = call_grammar("json", named)
    assert root == "root" and "city" in gbnf and "now" not in gbnf  # the named function's arguments only
    content, calls = parse_tool_calls("json", '{"city": "Paris"}', named="get_weather")
    assert content is None and calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert parse_tool_calls("json", "not json", named="get_weather") == ("not json", [])
    required = check_tools([WEATHER, CLOCK], "required")
    gbnf, _ = call_grammar("json", required)
    assert "get_weather" in gbnf and "now" in gbnf
    content, calls = parse_tool_calls("json", '{"name": "now", "arguments": {}}')
    assert calls[0]["function"]["name"] == "now" and json.loads(calls[0]["function"]["arguments"]) == {}
    stream = ToolCallStream("json", "get_weather")
    assert stream.push('{"city": ') == "" and stream.push('"Rome"}') == ""
    assert stream.finish()[1][0]["function"]["arguments"] == '{"city": "Rome"}'
