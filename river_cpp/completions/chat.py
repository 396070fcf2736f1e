"""Chat completions (llama-cpp-python's create_chat_completion): messages rendered by
the GGUF's chat template, structured output and tool calls constrained by grammars,
OpenAI's chat.completion dict out, or its chunks when streaming."""

from __future__ import annotations

import functools
import json
import time
import uuid
from typing import Any, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

from river_cpp.completions.chat_template import ChatTemplate, chat_template
from river_cpp.completions.shared import (
    Cancel,
    CompletionModel,
    Piece,
    Run,
    call_decoding,
    check_n,
    check_top_logprobs,
    n_choices,
    run_pieces,
    served_name,
    start,
    usage,
    usage_in_stream,
)
from river_cpp.completions.structured import request_grammar
from river_cpp.completions.tools import (
    ToolCallStream,
    ToolRequest,
    call_grammar,
    check_tools,
    known_call_syntax,
    parse_tool_calls,
)
from river_cpp.decoding.decision import Decoding
from river_cpp.decoding.generation import GenerationChunk
from river_cpp.decoding.grammar import Grammar
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.compute.policy import ExitPolicy

# What a chat message may say (llama.cpp's templates know these roles).
CHAT_ROLES = ("system", "user", "assistant")


# ... and what it may say when the template itself renders it (Jinja2).
TEMPLATE_ROLES = (*CHAT_ROLES, "tool")


# How chat messages become a prompt: "auto" renders with llama.cpp's built-in
# renderer unless tools or tool messages need the template itself; "jinja" always
# renders the GGUF's template with Jinja2 (as llama-cpp-python does).
TEMPLATE_ENGINES = ("auto", "jinja")


def _chat_logprobs(model: CompletionModel, chunks: Sequence[GenerationChunk]) -> dict[str, list]:
    """The chat `logprobs` object ({"content": [...]}) of `chunks`."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        raw = model.tokenizer.detokenize_bytes([token])
        return {"token": raw.decode("utf-8", errors="ignore"), "logprob": logprob, "bytes": list(raw)}

    content = []
    for chunk in chunks:
        item = entry(chunk.token_id, chunk.logprob)
        item["top_logprobs"] = [entry(t, lp) for t, lp in chunk.top_logprobs or ()]
        content.append(item)
    return {"content": content}


def chat_prompt(
    model: CompletionModel,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    template_engine: str = "auto",
    template: Optional[ChatTemplate] = None,
) -> str:
    """The prompt text of OpenAI-style `messages` in the model's chat template
    (or `template`, rendered with Jinja2).

    A message is {"role": "system" | "user" | "assistant", "content": text}; content
    may also be a list of {"type": "text", "text": ...} parts ("developer" is a system
    message). With `tools`, tool messages ({"role": "tool", "content": ...}) or an
    assistant's `tool_calls`, or template_engine "jinja", the GGUF's template itself
    renders them (river_cpp.apps.chat_template); otherwise llama.cpp's built-in renderer.
    A template that does not render `tools` is rendered without them (as it would
    ignore them). Raises ValueError naming the first message that does not fit.
    """
    if template_engine not in TEMPLATE_ENGINES:
        raise ValueError(f"template_engine must be one of {', '.join(TEMPLATE_ENGINES)}, got {template_engine!r}")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of messages")
    plain = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be an object")
        role = message.get("role")
        role = "system" if role == "developer" else role
        if role not in TEMPLATE_ROLES:
            raise ValueError(f"messages[{i}].role must be one of {', '.join(TEMPLATE_ROLES)}, got {role!r}")
        entry: dict[str, Any] = {"role": role, "content": _content_text(message.get("content"), i)}
        if message.get("tool_calls"):
            entry["tool_calls"] = _template_tool_calls(message["tool_calls"], i)
        for key in ("tool_call_id", "name"):
            if isinstance(message.get(key), str):
                entry[key] = message[key]
        plain.append(entry)
    if renders_template(messages, tools=tools, template_engine=template_engine):
        template = template if template is not None else chat_template(model.tokenizer)
        return template.render(plain, tools=tools if template.supports_tools else None)
    return model.tokenizer.apply_chat_template(plain, add_assistant=True)


def renders_template(
    messages: Sequence[Mapping[str, Any]], *, tools: Optional[Sequence[Any]], template_engine: str
) -> bool:
    """Whether chat_prompt renders these messages with the template itself (Jinja2)."""
    return (
        template_engine == "jinja"
        or bool(tools)
        or any(isinstance(m, Mapping) and (m.get("role") == "tool" or m.get("tool_calls")) for m in messages)
    )


def chat_add_bos(
    messages: Sequence[Mapping[str, Any]], *, tools: Optional[Sequence[Any]], template_engine: str
) -> bool:
    """Whether a chat prompt's tokens get BOS prepended: not where the template itself
    renders it (it writes its own BOS where it wants one: llama-cpp-python's rule). The
    one rule of the completion and of the server's early count."""
    return not renders_template(messages, tools=tools, template_engine=template_engine)


def _template_tool_calls(calls: object, i: int) -> list[dict[str, Any]]:
    """An assistant message's OpenAI tool_calls as templates read them (arguments
    as an object, as Hugging Face's templates expect)."""
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        raise ValueError(f"messages[{i}].tool_calls must be a list")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ValueError(f'messages[{i}].tool_calls entries must be {{"function": {{"name": ..., ...}}}}')
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                raise ValueError(f"messages[{i}].tool_calls arguments must be JSON") from None
        out.append({**call, "function": {"name": function["name"], "arguments": arguments}})
    return out


def _content_text(content: object, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f'messages[{i}].content parts must be {{"type": "text", "text": ...}}')
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"messages[{i}].content must be a string or a list of text parts")


def create_chat_completion(
    model: CompletionModel,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: Optional[int] = None,
    stream: bool = False,
    logprobs: bool = False,
    top_logprobs: Optional[int] = None,
    stream_options: Optional[Mapping[str, Any]] = None,
    sampling: Optional[SamplingParams] = None,
    policy: Optional[ExitPolicy] = None,
    speculative: Any = None,
    decoding: Optional[Decoding] = None,
    cancel: Optional[Cancel] = None,
    model_name: Optional[str] = None,
    grammar: Any = None,
    response_format: Optional[Mapping[str, Any]] = None,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    tool_choice: Any = None,
    template_engine: str = "auto",
    n: int = 1,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    chat_template_source: Optional[str] = None,
    **sampling_options: Any,
) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
    """The assistant's reply to `messages` as OpenAI's chat.completion dict, or an
    iterator of chat.completion.chunk dicts with stream=True.

    The messages go through the model's chat template (chat_prompt; template_engine
    "jinja" always renders the GGUF's template with Jinja2); defaults are
    llama-cpp-python's (river_cpp.decoding.decision.SAMPLING_DEFAULTS["chat"];
    max_tokens None: until the end of the turn or the context).
    logprobs=True adds {"content": [...]} with `top_logprobs` alternatives per token.
    response_format: {"type": "json_object"} (any JSON object), with a "schema" (JSON
    matching it; llama-cpp-python's form), or {"type": "json_schema", "json_schema":
    {"schema": ...}} (OpenAI's); grammar: a llama_cpp.LlamaGrammar or GBNF text.
    tools / tool_choice ("auto", "none", "required" or a named function): OpenAI's
    tool calls in the model's own syntax, returned as message.tool_calls with
    finish_reason "tool_calls"; "required" and a named function constrain the reply
    to a call whose arguments match the function's schema. On a template without a
    tool syntax (river_cpp.apps.tools.known_call_syntax), "auto" gives text, and
    "required" or a named function make the whole reply the call's JSON (the named
    function's arguments; for "required", {"name": ..., "arguments": ...}), as
    llama-cpp-python's template handlers do.
    chat_template_source: a Jinja2 chat template to render instead of the GGUF's.
    n, logits_processor, stopping_criteria, the usage block and locking are as in
    create_completion.
    """
    call = _check_chat_call(model, logprobs, top_logprobs, stream_options, tools, tool_choice, chat_template_source)
    decoding = call_decoding(model, "chat", decoding, policy, speculative, sampling, sampling_options)
    one = functools.partial(
        _one_chat_completion,
        model,
        messages,
        call,
        stream=stream,
        max_tokens=max_tokens,
        cancel=cancel,
        model_name=model_name,
        grammar=grammar,
        response_format=response_format,
        template_engine="jinja" if chat_template_source is not None else template_engine,
        hooks={"logits_processor": logits_processor, "stopping_criteria": stopping_criteria},
    )
    if check_n(n) > 1:
        return n_choices(one, n, decoding, stream)
    return one(decoding)


class _ChatCall(NamedTuple):
    """A chat call's options that are checked once, for all of its n choices."""

    logprobs: Optional[int]  # the alternatives per token when logprobs=True (0: none), else None
    include_usage: bool  # a stream's last chunk carries usage
    tools: Optional[Sequence[Mapping[str, Any]]]  # as given
    request: Optional[ToolRequest]  # tools and tool_choice, checked
    template: Optional[ChatTemplate]  # the template rendered, where the call needs it itself
    syntax: Optional[str]  # the tool-call syntax replies are parsed in (None: no parsing)


def _check_chat_call(
    model: CompletionModel,
    logprobs: object,
    top_logprobs: object,
    stream_options: Optional[Mapping[str, Any]],
    tools: Optional[Sequence[Mapping[str, Any]]],
    tool_choice: Any,
    chat_template_source: Optional[str],
) -> _ChatCall:
    """ValueError naming a bad logprobs / top_logprobs / stream_options / tools /
    tool_choice; the checked call otherwise, with the template and tool-call syntax
    its reply is parsed in."""
    if not isinstance(logprobs, bool):
        raise ValueError(f"logprobs must be a boolean, got {logprobs!r}")
    n_top = check_top_logprobs("top_logprobs", top_logprobs)
    if n_top is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    include_usage = usage_in_stream(stream_options)
    request = check_tools(tools, tool_choice)
    template = None
    if chat_template_source is not None or (request is not None and request.parsed):
        template = _template(model, chat_template_source)
    syntax = None
    if request is not None and request.parsed:
        syntax = known_call_syntax(template.source) or ("json" if request.constrained else None)
    return _ChatCall((n_top or 0) if logprobs else None, include_usage, tools, request, template, syntax)


def _one_chat_completion(
    model: CompletionModel,
    messages: Sequence[Mapping[str, Any]],
    call: _ChatCall,
    decoding: Decoding,
    *,
    stream: bool,
    max_tokens: Optional[int],
    cancel: Optional[Cancel],
    model_name: Optional[str],
    grammar: Any,
    response_format: Optional[Mapping[str, Any]],
    template_engine: str,
    hooks: Mapping[str, Any],
) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
    """One choice of a chat call, decoded by `decoding`: its chunks, or its dict."""
    request = call.request
    prompt = chat_prompt(
        model,
        messages,
        tools=request.tools if request is not None else None,
        template_engine=template_engine,
        template=call.template,
    )
    generation, run = start(
        model,
        prompt,
        max_tokens=max_tokens,
        decoding=decoding,
        logprobs=call.logprobs,
        grammar=_chat_grammar(model, request, call.syntax, grammar, response_format),
        add_bos=chat_add_bos(messages, tools=call.tools, template_engine=template_engine),
        hooks=hooks,
    )
    pieces = run_pieces(model, generation, run, cancel)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": served_name(model, model_name)}
    named = request.named if request is not None else None
    with_logprobs = call.logprobs is not None
    if stream:
        return _chat_chunks(model, pieces, run, base, with_logprobs, call.include_usage, call.syntax, named)
    for _ in pieces:  # the text is run.text, whole
        pass
    message: dict[str, Any] = {"role": "assistant", "content": run.text}
    finish_reason = run.finish_reason
    if call.syntax is not None:
        content, calls = parse_tool_calls(call.syntax, run.text, named=named)
        if calls:
            message = {"role": "assistant", "content": content, "tool_calls": calls}
            if call.syntax == "json":  # llama-cpp-python's forced call also fills the legacy field
                message["function_call"] = dict(calls[0]["function"])
            finish_reason = "tool_calls"
    return {
        **base,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": _chat_logprobs(model, run.chunks) if with_logprobs else None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage(model, run),
    }


def _template(model: CompletionModel, source: Optional[str]) -> ChatTemplate:
    """The chat template a call renders: `source` (a Jinja2 template), or the GGUF's."""
    if source is None:
        return chat_template(model.tokenizer)
    return ChatTemplate(model.tokenizer, source=source)


def _chat_grammar(
    model: CompletionModel,
    request: Optional[ToolRequest],
    syntax: Optional[str],
    grammar: Any,
    response_format: Optional[Mapping[str, Any]],
) -> Optional[Grammar]:
    """The grammar a chat request constrains its reply with: a forced tool call's, or
    its own grammar / response_format's."""
    if request is not None and request.constrained:
        if grammar is not None or (response_format or {}).get("type", "text") != "text":
            raise ValueError("a required or named tool_choice sets the reply's format: drop grammar, response_format")
        gbnf, root = call_grammar(syntax, request)
        return Grammar(model.tokenizer, gbnf, root)
    return request_grammar(model, grammar=grammar, response_format=response_format)


def _chat_chunks(
    model: CompletionModel,
    pieces: Iterator[Piece],
    run: Run,
    base: dict[str, Any],
    with_logprobs: bool,
    include_usage: bool,
    syntax: Optional[str] = None,
    named: Optional[str] = None,
) -> Iterator[dict[str, Any]]:
    """The chat chunk dicts: a content delta per piece (an empty one too, as
    llama-cpp-python's); with a tool-call `syntax`, text that may be a call is held
    back and a call is sent as OpenAI's tool_calls deltas at the end."""
    base = {**base, "object": "chat.completion.chunk"}
    calls = ToolCallStream(syntax, named) if syntax is not None else None
    extra = {"usage": None} if include_usage else {}
    pending: list[GenerationChunk] = []

    def chunk(delta: dict[str, str], finish_reason: Optional[str]) -> dict[str, Any]:
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": _chat_logprobs(model, pending) if with_logprobs and pending else None,
            "finish_reason": finish_reason,
        }
        pending.clear()
        return {**base, "choices": [choice], **extra}

    try:
        yield chunk({"role": "assistant"}, None)
        for piece in pieces:
            pending.extend(piece.chunks)
            if calls is None:
                yield chunk({"content": piece.text}, None)
                continue
            text = calls.push(piece.text)
            if text:
                yield chunk({"content": text}, None)
        finish_reason = run.finish_reason
        if calls is not None:
            rest, tool_calls = calls.finish()
            if rest:
                yield chunk({"content": rest}, None)
            for index, call in enumerate(tool_calls):
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                opening = {"index": index, "id": call["id"], "type": "function"}
                yield chunk({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]}, None)
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}, None)
            if tool_calls:
                finish_reason = "tool_calls"
        yield chunk({}, finish_reason)
        if include_usage:
            yield {**base, "choices": [], "usage": usage(model, run)}
    finally:
        pieces.close()
