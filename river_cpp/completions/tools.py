"""Tool calls: OpenAI's `tools` and `tool_choice` through the model's own chat template.

The template (river_cpp.apps.chat_template) tells the model about the tools and how to
call them; this module knows the two call syntaxes templates teach, checks the
request, turns the model's text into OpenAI `tool_calls`, and, for tool_choice
"required" or a named function, builds the grammar that makes the model write a call
whose arguments match the function's JSON schema.

- "hermes" (Qwen2.5, Hermes, many others): <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>
- "llama3" (Llama 3.1 / 3.2): {"name": ..., "parameters": {...}}, optionally after <|python_tag|>
- "json": a template with no tool syntax (SmolLM2's, Gemma's): a forced call is the
  whole reply, the named function's arguments object or, for "required",
  {"name": ..., "arguments": {...}} (llama-cpp-python's template handlers force the former)
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from river_cpp.decoding.grammar import schema_grammar

TOOL_CHOICES = ("none", "auto", "required")
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def known_call_syntax(template_source: str) -> Optional[str]:
    """ "hermes" or "llama3": how the template asks the model to call a tool; None
    for a template without a tool syntax river-cpp knows."""
    if _HERMES_OPEN in template_source:
        return "hermes"
    if "parameters" in template_source and ("ipython" in template_source or _PYTHON_TAG in template_source):
        return "llama3"
    return None


def call_syntax(template_source: str) -> str:
    """known_call_syntax, with ValueError for a template without one."""
    syntax = known_call_syntax(template_source)
    if syntax is None:
        raise ValueError(
            "this chat template renders tools, but not in a tool-call syntax river-cpp knows (hermes, llama3)"
        )
    return syntax


@dataclass(frozen=True)
class ToolRequest:
    """A checked `tools` / `tool_choice` pair."""

    tools: tuple[Mapping[str, Any], ...]
    choice: str  # "none", "auto", "required" or "named"
    named: Optional[str] = None  # the function tool_choice names

    @property
    def constrained(self) -> bool:
        """Whether the model must call a tool (a grammar makes it)."""
        return self.choice in ("required", "named")

    @property
    def parsed(self) -> bool:
        """Whether the model's text is parsed for tool calls."""
        return self.choice != "none"


def check_tools(tools: Any, tool_choice: Any) -> Optional[ToolRequest]:
    """The request's tools as a ToolRequest (None without tools); ValueError naming
    the first thing wrong. A function without `parameters` takes none (arguments {})."""
    if tools is None:
        if tool_choice not in (None, "none", "auto"):
            raise ValueError("tool_choice needs tools")
        return None
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        raise ValueError("tools must be a non-empty list of tools")
    checked, names = [], set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or tool.get("type") != "function":
            raise ValueError(f'tools[{i}] must be {{"type": "function", "function": {{...}}}}')
        function = dict(function)
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        if name in names:
            raise ValueError(f"tools[{i}]: two tools are named {name!r}")
        names.add(name)
        parameters = function.get("parameters")
        if parameters is None:
            function["parameters"] = {"type": "object", "properties": {}, "additionalProperties": False}
        elif not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema of an object")
        checked.append({"type": "function", "function": function})
    if tool_choice is None or tool_choice in TOOL_CHOICES:
        return ToolRequest(tuple(checked), tool_choice or "auto")
    if isinstance(tool_choice, Mapping) and isinstance(tool_choice.get("function"), Mapping):
        name = tool_choice["function"].get("name")
        if name not in names:
            raise ValueError(f"tool_choice names {name!r}, which is not one of the tools")
        return ToolRequest(tuple(checked), "named", name)
    raise ValueError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": }}')


def call_grammar(syntax: str, request: ToolRequest) -> tuple[str, str]:
    """(GBNF, root rule) of one call of the tools `request` allows (the named one, or
    any for "required"), its arguments matching the function's schema."""
    if syntax == "json" and request.choice == "named":
        tool = next(t for t in request.tools if t["function"]["name"] == request.named)
        return schema_grammar(tool["function"]["parameters"]), "root"
    arguments = "parameters" if syntax == "llama3" else "arguments"
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t["function"]["name"]}, arguments: t["function"]["parameters"]},
            "required": ["name", arguments],
            "additionalProperties": False,
        }
        for t in request.tools
        if request.choice == "required" or t["function"]["name"] == request.named
    ]
    gbnf = schema_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls})
    if syntax == "hermes":
        return gbnf + '\ntool-call ::= "<tool_call>\\n" root "\\n</tool_call>"\n', "tool-call"
    return gbnf, "root"


def _call(name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": text}}


def _as_call(body: str, arguments_key: str) -> Optional[dict[str, Any]]:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get(arguments_key, value.get("arguments", value.get("parameters", {})))
    return _call(value["name"], arguments)


def parse_tool_calls(syntax: str, text: str, named: Optional[str] = None) -> tuple[Optional[str], list[dict[str, Any]]]:
    """(content, tool_calls) of the model's text: the calls in OpenAI's shape and the
    text around them (None when there is none). Text that is not a well-formed call
    stays content. `named`: the function a "json" reply is the arguments of."""
    if syntax == "json":
        if named is not None:
            try:
                json.loads(text)
            except ValueError:
                return text, []
            return None, [_call(named, text)]
        call = _as_call(text.strip(), "arguments")
        return (None, [call]) if call is not None else (text, [])
    if syntax == "hermes":
        calls, kept = [], []
        position = 0
        for match in _HERMES_CALL.finditer(text):
            call = _as_call(match.group(1), "arguments")
            if call is None:
                continue
            calls.append(call)
            kept.append(text[position : match.start()])
            position = match.end()
        kept.append(text[position:])
        content = "".join(kept).strip()
        return (content or None) if calls else text, calls
    body = text.strip()
    body = body[len(_PYTHON_TAG) :] if body.startswith(_PYTHON_TAG) else body
    call = _as_call(body, "parameters")
    return (None, [call]) if call is not None else (text, [])


class ToolCallStream:
    """Streamed text -> the content that is safe to stream now; the calls at the end.

    Text that is or may become a tool call is held back (the call is sent whole, as
    tool_calls deltas, when the generation ends)."""

    def __init__(self, syntax: str, named: Optional[str] = None) -> None:
        self.syntax = syntax
        self.named = named
        self.text = ""
        self._shown = 0

    def push(self, piece: str) -> str:
        self.text += piece
        end = self._safe_end()
        new, self._shown = self.text[self._shown : end], max(self._shown, end)
        return new

    def _safe_end(self) -> int:
        if self.syntax == "json":
            return self._shown  # the whole reply is the call
        if self.syntax == "hermes":
            found = self.text.find(_HERMES_OPEN, self._shown)
            if found >= 0:
                return found
            for length in range(min(len(_HERMES_OPEN) - 1, len(self.text)), 0, -1):
                if self.text.endswith(_HERMES_OPEN[:length]):
                    return len(self.text) - length
            return len(self.text)
        stripped = self.text.lstrip()
        if stripped.startswith("{") or _PYTHON_TAG.startswith(stripped[: len(_PYTHON_TAG)]):
            return self._shown  # may be a call: hold everything
        return len(self.text)

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """(the content not streamed yet, the tool calls)."""
        content, calls = parse_tool_calls(self.syntax, self.text, self.named)
        if not calls:
            return self.text[self._shown :], []
        return "", calls  # what the model wrote around its calls was streamed before them, or is dropped
