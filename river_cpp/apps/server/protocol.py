"""The server's side of OpenAI's protocol, without HTTP: request validation and the
shapes of errors and of the model list.

Every field of a request is checked here, before anything reaches the worker, and a
bad one becomes an APIError in OpenAI's shape naming the field (`param`). Nothing here
imports starlette, so it is tested without the server extra and without a socket.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from river_cpp.completions.chat import chat_add_bos, chat_prompt
from river_cpp.completions.chat_template import chat_template
from river_cpp.completions.shared import MAX_CHOICES
from river_cpp.completions.structured import request_grammar, response_format_grammar
from river_cpp.completions.tools import check_tools
from river_cpp.decoding.decision import Decoding, decide, sampling_defaults
from river_cpp.decoding.presets import DEFAULT
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.compute.context import ContextOverflowError, check_fits
from river_cpp.engine.compute.policy import ExitPolicy, exit_policy

RETRY_AFTER_SECONDS = 1
MAX_STOP_STRINGS = 4
MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 300  # entries (OpenAI's cap)
RIVER_OPTIONS = ("tau", "min_layer", "exit_layer", "policy", "speculative")


class APIError(Exception):
    """An error answered in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: Optional[str] = None,
        code: Optional[str] = None,
        kind: str = "invalid_request_error",
        headers: Optional[Mapping[str, str]] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code, **self.extra}
        }


def busy(message: str) -> APIError:
    """503 with Retry-After: the model is loading, or the queue is full."""
    return APIError(
        503, message, kind="server_error", code="server_busy", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


def too_large(max_body_bytes: int) -> APIError:
    """413: the request body is over the cap."""
    return APIError(413, f"the request body is larger than {max_body_bytes} bytes", code="request_too_large")


def overflow_error(error: ContextOverflowError, *, chat: bool) -> APIError:
    """400 context_length_exceeded, with the token counts beside the message."""
    return APIError(
        400,
        str(error),
        param="messages" if chat else "prompt",
        code="context_length_exceeded",
        extra={"prompt_tokens": error.prompt_tokens, "n_ctx": error.n_ctx},
    )


def model_list(model_id: str, created: int, details: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """GET /v1/models: the one served model; `details` (once it is loaded) go into `river`."""
    entry: dict[str, Any] = {"id": model_id, "object": "model", "created": created, "owned_by": "river-cpp"}
    if details is not None:
        entry["river"] = dict(details)
    return {"object": "list", "data": [entry]}


# ---------------------------------------------------------------- fields


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object (NaN and Infinity are not JSON)."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


def _number(
    body: Mapping[str, Any], name: str, default: Optional[float], low: float, high: float, *, low_open: bool = False
) -> Optional[float]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise APIError(400, f"{name} must be a finite number, got {value!r}", param=name)
    if value < low or value > high or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise APIError(400, f"{name} must be in {interval}, got {value!r}", param=name)
    return float(value)


def _integer(body: Mapping[str, Any], name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(400, f"{name} must be an integer, got {value!r}", param=name)
    if not low <= value <= high:
        raise APIError(400, f"{name} must be an integer in [{low}, {high}], got {value!r}", param=name)
    return value


def _boolean(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise APIError(400, f"{name} must be a boolean, got {value!r}", param=name)
    return value


def _stop(body: Mapping[str, Any]) -> Optional[list[str]]:
    stop = body.get("stop")
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stops):
        raise APIError(
            400, f"stop must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them", param="stop"
        )
    return stops


def _river_field(body: Mapping[str, Any], n_layer: int) -> tuple[Optional[ExitPolicy], Optional[bool]]:
    """The `river` extension field's exit policy and speculative flag (None where it
    does not say), checked; river_cpp.decoding.decision resolves them."""
    river = body.get("river")
    if river is None:
        return None, None
    if not isinstance(river, dict):
        raise APIError(400, "river must be an object", param="river")
    unknown = set(river) - set(RIVER_OPTIONS)
    if unknown:
        raise APIError(400, f"unknown river options: {', '.join(sorted(unknown))}", param="river")
    if river.get("policy") is not None and not isinstance(river["policy"], dict):
        raise APIError(400, "river.policy must be a policy object (as `river-cpp calibrate` writes)", param="river")
    try:
        policy = exit_policy(
            tau=_number(river, "tau", None, -1.0, 1.0),
            exit_layer=_integer(river, "exit_layer", None, 0, n_layer),
            policy=river.get("policy"),
            min_layer=_integer(river, "min_layer", DEFAULT.min_layer, 0, n_layer),
        )
    except ValueError as error:
        raise APIError(400, f"river: {error}", param="river") from None
    speculative = river.get("speculative")
    if speculative is not None and not isinstance(speculative, bool):
        raise APIError(400, "river.speculative must be a boolean", param="river")
    return policy, speculative


def _unsupported(body: Mapping[str, Any]) -> None:
    if _integer(body, "best_of", 1, 1, 1) != 1:
        raise APIError(400, "best_of must be 1", param="best_of")
    if body.get("echo"):
        raise APIError(400, "echo is not supported", param="echo")
    if body.get("suffix"):
        raise APIError(400, "suffix is not supported", param="suffix")


def _sampling(body: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    """max_tokens and the SamplingParams of a request, shared by both endpoints
    (the endpoint's defaults: river_cpp.decoding.decision.SAMPLING_DEFAULTS)."""
    max_tokens = _integer(
        body,
        "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens",
        None if chat else 16,
        1,
        1 << 30,
    )
    seed = _integer(body, "seed", None, -(1 << 63), (1 << 64) - 1)
    default = sampling_defaults("chat" if chat else "completion")  # RiverModel.create_*completion's
    sampling = SamplingParams(
        temperature=_number(body, "temperature", default.temperature, 0.0, 2.0),
        top_p=_number(body, "top_p", default.top_p, 0.0, 1.0),
        top_k=_integer(body, "top_k", default.top_k, 0, 1 << 30),
        min_p=_number(body, "min_p", default.min_p, 0.0, 1.0),
        repeat_penalty=_number(body, "repeat_penalty", default.repeat_penalty, 0.0, 10.0, low_open=True),
        seed=None if seed is None else seed % (1 << 64),
        stop=tuple(_stop(body) or ()),
    )
    options = {"max_tokens": max_tokens, "sampling": sampling, "n": _integer(body, "n", 1, 1, MAX_CHOICES)}
    stream = _boolean(body, "stream", False)
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise APIError(400, "stream_options must be an object", param="stream_options")
        _boolean(stream_options, "include_usage", False)
        if not stream:
            raise APIError(400, "stream_options needs stream: true", param="stream_options")
    options["stream"] = stream
    options["stream_options"] = stream_options
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise APIError(400, "user must be a string", param="user")
    return options


def _sampling_extras(body: Mapping[str, Any]) -> dict[str, Any]:
    """The SamplingParams settings beyond _sampling's: OpenAI's penalties and
    logit_bias, llama.cpp's typical_p (token ids are checked against the vocabulary in
    check_structured)."""
    extras = {
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2.0, 2.0),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        "typical_p": _number(body, "typical_p", 1.0, 0.0, 1.0),
    }
    bias = body.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS:
            raise APIError(400, f"logit_bias must map at most {MAX_LOGIT_BIAS} token ids to biases", param="logit_bias")
        pairs = {}
        for key in bias:
            if not isinstance(key, str) or not key.isdigit():
                raise APIError(400, f"logit_bias keys must be token ids, got {key!r}", param="logit_bias")
            pairs[int(key)] = _number(bias, key, 0.0, -100.0, 100.0)
        extras["logit_bias"] = pairs
    return extras


def _structured_options(body: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    """response_format, grammar (llama.cpp's server's GBNF field), tools and
    tool_choice (and the older functions / function_call), checked as far as they can
    be without the model (check_structured does the rest)."""
    options: dict[str, Any] = {}
    response_format = body.get("response_format")
    if response_format is not None:
        if not chat:
            raise APIError(400, "response_format is a chat completions field", param="response_format")
        try:
            response_format_grammar(response_format)
        except ValueError as error:
            raise APIError(400, f"response_format: {error}", param="response_format") from None
        options["response_format"] = response_format
    grammar = body.get("grammar")
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise APIError(400, "grammar must be GBNF text", param="grammar")
        options["grammar"] = grammar
    tools, tool_choice = body.get("tools"), body.get("tool_choice")
    if body.get("functions") is not None and tools is None:
        functions = body["functions"]
        tools = [{"type": "function", "function": f} for f in functions] if isinstance(functions, list) else functions
    call = body.get("function_call")
    if call is not None and tool_choice is None:
        tool_choice = call if isinstance(call, str) else {"type": "function", "function": call}
    if tools is None and tool_choice is None:
        return options
    if not chat:
        raise APIError(400, "tools are a chat completions field", param="tools")
    try:
        check_tools(tools, tool_choice)
    except ValueError as error:
        raise APIError(400, str(error), param="tool_choice" if "tool_choice" in str(error) else "tools") from None
    options["tools"], options["tool_choice"] = tools, tool_choice
    return options


def _completion_prompt(body: Mapping[str, Any]) -> Union[str, list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise APIError(400, "prompt must be a string, or a list of token ids (one prompt per request)", param="prompt")


# ---------------------------------------------------------------- requests


@dataclass
class ParsedRequest:
    """A validated request: what to call on the model, and how to answer."""

    chat: bool
    prompt: Union[str, list[int], list[dict[str, Any]]]
    options: dict[str, Any]

    @property
    def stream(self) -> bool:
        """Whether the answer is an SSE stream of chunks."""
        return self.options["stream"]


def parse_request(
    body: Mapping[str, Any], *, chat: bool, n_layer: int, has_river: bool, defaults: Decoding
) -> ParsedRequest:
    """Check every field of a completions or chat completions body; APIError otherwise.

    The request's decoding (options["decoding"]) is resolved by
    river_cpp.decoding.decision over `defaults` (the served model's: what a request
    whose `river` field does not say decodes with) on a model of n_layer layers with
    or without a river.

    `model` may name anything: the server has one model and serves it whatever the
    request calls it (llama.cpp's server and llama-cpp-python's do the same), so a
    request never names a file to load.
    """
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise APIError(400, "model must be a string", param="model")
    _unsupported(body)
    options = _sampling(body, chat=chat)
    options["sampling"] = options["sampling"].replace(**_sampling_extras(body))
    options.update(_structured_options(body, chat=chat))
    policy, speculative = _river_field(body, n_layer)
    try:
        options["decoding"] = decide(
            defaults,
            n_layer=n_layer,
            has_river=has_river,
            policy=policy,
            speculative=speculative,
            sampling=options.pop("sampling"),
        )
    except (TypeError, ValueError) as error:
        raise APIError(400, f"river: {error}", param="river") from None
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError(400, "messages must be a non-empty list", param="messages")
        options["logprobs"] = _boolean(body, "logprobs", False)
        options["top_logprobs"] = _integer(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
        if options["top_logprobs"] is not None and not options["logprobs"]:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return ParsedRequest(True, messages, options)
    options["logprobs"] = _integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    return ParsedRequest(False, _completion_prompt(body), options)


def prompt_tokens(model, parsed: ParsedRequest) -> int:
    """How many tokens `parsed`'s prompt is on `model` (its tokenizer and chat template
    only: this may run beside a generation). APIError for messages the template
    refuses and for token ids outside the vocabulary."""
    if parsed.chat:
        try:
            text = chat_prompt(model, parsed.prompt, tools=_offered_tools(parsed))  # type: ignore[arg-type]
        except ValueError as error:
            raise APIError(400, str(error), param="messages") from None
        # BOS as the completion adds it: a rendered template writes its own (chat_add_bos)
        add_bos = chat_add_bos(parsed.prompt, tools=parsed.options.get("tools"), template_engine="auto")
        return len(model.tokenize(text, add_bos=add_bos, special=True))
    if isinstance(parsed.prompt, str):
        return len(model.tokenize(parsed.prompt, add_bos=True, special=True))
    if any(not 0 <= t < model.n_vocab for t in parsed.prompt):
        raise APIError(400, f"prompt token ids must be in [0, {model.n_vocab})", param="prompt")
    return len(parsed.prompt)


def check_prompt_fits(model, parsed: ParsedRequest) -> None:
    """400 context_length_exceeded with the token counts when the prompt leaves no
    room to generate in the model's context (river_cpp.engine.compute.context's check, before the
    request waits in the queue)."""
    try:
        check_fits(prompt_tokens(model, parsed), model.n_ctx)
    except ContextOverflowError as error:
        raise overflow_error(error, chat=parsed.chat) from None


def _offered_tools(parsed: ParsedRequest) -> Optional[list[Any]]:
    """The tools the prompt tells the model of (none for tool_choice "none")."""
    request = check_tools(parsed.options.get("tools"), parsed.options.get("tool_choice"))
    return list(request.tools) if request is not None else None


def check_structured(model, parsed: ParsedRequest) -> None:
    """400 naming the field for what needs the model to check: logit_bias ids outside
    the vocabulary, a grammar or schema llama.cpp cannot compile, tools on a model
    without a chat template. The compiled grammar replaces grammar / response_format in
    the options (river_cpp.decoding.grammar.Grammar), so it is compiled once."""
    options = parsed.options
    outside = [t for t, _ in options["decoding"].sampling.logit_bias if t >= model.n_vocab]
    if outside:
        raise APIError(400, f"logit_bias token id {outside[0]} is outside [0, {model.n_vocab})", param="logit_bias")
    if options.get("tools") is not None and options.get("tool_choice") != "none":
        try:
            chat_template(model.tokenizer)  # on a template without a tool syntax, calls are forced JSON
        except ValueError as error:
            raise APIError(400, str(error), param="tools") from None
    param = "grammar" if options.get("grammar") is not None else "response_format"
    try:
        grammar = request_grammar(model, grammar=options.get("grammar"), response_format=options.get("response_format"))
    except ValueError as error:
        raise APIError(400, f"{param}: {error}", param=param) from None
    options.pop("response_format", None)
    options["grammar"] = grammar
