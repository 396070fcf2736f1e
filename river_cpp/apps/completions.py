"""OpenAI-shaped completions on a RiverModel, in llama-cpp-python's API shape.

Owns the step from request options to one generation and back to OpenAI's dicts
(chunk dicts when streaming), with River's `river` block in `usage`. The decode loop
is river_cpp.decoding.generation's; HTTP, its validation and SSE framing are river_cpp.apps.server's.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import numbers
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Protocol, Sequence, Union

from river_cpp.apps.chat_template import ChatTemplate, chat_template
from river_cpp.apps.completion_text import CompletionText, TextPiece
from river_cpp.apps.structured import request_grammar
from river_cpp.apps.tools import (
    ToolCallStream,
    ToolRequest,
    call_grammar,
    check_tools,
    known_call_syntax,
    parse_tool_calls,
)
from river_cpp.decoding.decision import Decoding, check_alone
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationChunk, GenerationStream
from river_cpp.decoding.grammar import Grammar
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.context import ContextOverflowError, check_fits
from river_cpp.engine.policy import ExitPolicy

# What a chat message may say (llama.cpp's templates know these roles).
CHAT_ROLES = ("system", "user", "assistant")
# ... and what it may say when the template itself renders it (Jinja2).
TEMPLATE_ROLES = (*CHAT_ROLES, "tool")
# How chat messages become a prompt: "auto" renders with llama.cpp's built-in
# renderer unless tools or tool messages need the template itself; "jinja" always
# renders the GGUF's template with Jinja2 (as llama-cpp-python does).
TEMPLATE_ENGINES = ("auto", "jinja")
# finish_reason of a generation stopped through `cancel` (not one of OpenAI's).
CANCELLED = "cancelled"

__all__ = ["CANCELLED", "Cancel", "ContextOverflowError", "chat_prompt", "create_chat_completion", "create_completion"]


class Cancel(Protocol):
    """Anything with is_set(), e.g. a threading.Event: set it to stop a generation."""

    def is_set(self) -> bool: ...


# ---------------------------------------------------------------- one generation


@dataclass
class _Run:
    """What a generation produced so far, and how it ended."""

    prompt_ids: list[int]
    cached_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    exit_layers: list[int] = field(default_factory=list)
    # the text, as llama-cpp-python gives it from the tokens' bytes
    output: CompletionText = field(default_factory=CompletionText)
    chunks: list[GenerationChunk] = field(default_factory=list)
    finish_reason: Optional[str] = None
    started: float = field(default_factory=time.perf_counter)
    first_token_at: Optional[float] = None
    ended_at: Optional[float] = None
    speculative: Any = None
    # why a call that would draft decodes plainly (its logits hooks run on each step)
    plain_reason: Optional[str] = None

    @property
    def text(self) -> str:
        """The completion's text (invalid UTF-8 dropped, cut before a stop string)."""
        return self.output.text


@dataclass
class _Piece:
    """One text chunk of a stream and the generated tokens it gives (their logprobs)."""

    text: str
    chunks: list[GenerationChunk]


def _run(model, stream: GenerationStream, run: _Run, cancel: Optional[Cancel]) -> Iterator[_Piece]:
    """The text pieces of `stream` (which holds the model's lock while it runs), cut
    as llama-cpp-python's stream cuts them (river_cpp.apps.completion_text); fills `run`.
    The end-of-turn token that ends a generation is no completion token: no piece
    gives it, and usage does not count it (llama-cpp-python's rule)."""
    given = 0  # chunks of run.chunks a piece gave

    def pieces(cut: list[TextPiece]) -> Iterator[_Piece]:
        nonlocal given
        for piece in cut:
            yield _Piece(piece.text, run.chunks[given : given + piece.n_tokens])
            given += piece.n_tokens

    try:
        run.started = time.perf_counter()
        for chunk in stream:
            if run.first_token_at is None:
                run.first_token_at = time.perf_counter()
            run.token_ids.append(chunk.token_id)
            run.exit_layers.append(chunk.exit_layer)
            run.cached_tokens += chunk.cached_tokens
            if not model.tokenizer.is_end_of_generation(chunk.token_id):
                run.chunks.append(chunk)
                yield from pieces(run.output.push(model.tokenizer.detokenize_bytes([chunk.token_id])))
            if cancel is not None and cancel.is_set():
                run.finish_reason = CANCELLED
                break
        else:
            result = stream.result
            run.finish_reason = result.finish_reason
            run.speculative = result.speculative
            run.cached_tokens = result.cached_tokens  # also when a stopping criterion dropped every chunk
        yield from pieces(run.output.finish())
    finally:
        run.ended_at = time.perf_counter()
        stream.close()


def _start(
    model,
    prompt: Union[str, Sequence[int]],
    *,
    max_tokens: Optional[int],
    decoding: Decoding,
    logprobs: Optional[int],
    grammar: Optional[Grammar] = None,
    add_bos: bool = True,
    hooks: Optional[Mapping[str, Any]] = None,
) -> tuple[GenerationStream, _Run]:
    """Check every option and tokenize; the (not yet running) stream and its record.
    `hooks`: logits_processor / stopping_criteria (llama-cpp-python's), which make a
    drafting call decode plainly."""
    hooks = {name: value for name, value in (hooks or {}).items() if value is not None}
    if isinstance(prompt, str):
        prompt_ids = model.tokenize(prompt, add_bos=add_bos, special=True)
    else:
        prompt_ids = list(prompt)
    check_fits(len(prompt_ids), model.n_ctx)
    if max_tokens is None or (
        isinstance(max_tokens, numbers.Integral) and not isinstance(max_tokens, bool) and max_tokens <= 0
    ):
        max_tokens = model.n_ctx  # llama-cpp-python: None or <= 0 generates until the context is full
    plain_reason = None
    if hooks and decoding.drafts:
        plain_reason = f"{' and '.join(sorted(hooks))} run on each step's logits: plain decoding, no drafts"
        decoding = dataclasses.replace(decoding, speculative=None)
    stream = model.generate(
        prompt_ids, stream=True, max_tokens=max_tokens, logprobs=logprobs, decoding=decoding, grammar=grammar, **hooks
    )
    output = CompletionText(decoding.sampling.stop, each_token=logprobs is not None)
    return stream, _Run(prompt_ids=prompt_ids, plain_reason=plain_reason, output=output)


def _decoding(
    model,
    kind: str,
    decoding: Optional[Decoding],
    policy: Optional[ExitPolicy],
    speculative: Any,
    sampling: Optional[SamplingParams],
    sampling_options: Mapping[str, Any],
) -> Decoding:
    """The call's Decoding: `decoding` as given, or its options resolved by the model
    (river_cpp.decoding.decision) with the defaults of entry `kind`."""
    if decoding is None:
        options = _sampling_options(sampling_options)
        return model.decoding(kind, policy=policy, speculative=speculative, sampling=sampling, **options)
    check_alone(policy, speculative, sampling, dict(sampling_options))
    return decoding


def _usage(model, run: _Run) -> dict[str, Any]:
    """OpenAI's usage, with the prompt cache's hits and River's `river` block."""
    stats = ExitStats.from_exit_layers(run.exit_layers, model.n_layer)
    ended = run.ended_at or time.perf_counter()
    first = run.first_token_at or ended
    prompt_seconds, generation_seconds = first - run.started, ended - first
    n_prompt, n_computed, n_generated = len(run.prompt_ids), len(run.token_ids), run.output.n_tokens
    river: dict[str, Any] = {
        "n_layer": model.n_layer,
        "mean_exit_layer": None if stats.n_tokens == 0 else round(stats.mean_exit_layer, 4),
        "backbone_layers_avoided": round(stats.backbone_fraction_avoided, 4),
        "exit_histogram": list(stats.histogram),
        "prompt_seconds": round(prompt_seconds, 6),
        "generation_seconds": round(generation_seconds, 6),
        "prompt_tokens_per_second": round((n_prompt - run.cached_tokens) / prompt_seconds, 2)
        if prompt_seconds > 0
        else 0.0,
        "generation_tokens_per_second": round((n_computed - 1) / generation_seconds, 2)
        if n_computed > 1 and generation_seconds > 0
        else 0.0,
    }
    if run.speculative is not None:
        spec = run.speculative
        river["speculative"] = {
            "rounds": spec.rounds,
            "drafted": spec.drafted,
            "accepted": spec.accepted,
            "acceptance_rate": round(spec.acceptance_rate, 4),
            "tokens_per_round": round(spec.tokens_per_round, 4),
        }
    if run.plain_reason is not None:
        river["plain_decoding"] = run.plain_reason
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_generated,
        "total_tokens": n_prompt + n_generated,
        "prompt_tokens_details": {"cached_tokens": run.cached_tokens},
        "river": river,
    }


def _model_name(model, name: Optional[str]) -> str:
    return name if name is not None else os.path.basename(model.model_path)


def _sampling_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A call's sampling settings one by one, as SamplingParams takes them: logit_bias
    may key token ids as strings (JSON's objects do), and None means none."""
    options = dict(options)
    bias = options.get("logit_bias")
    if isinstance(bias, Mapping):
        options["logit_bias"] = {_token_key(k): v for k, v in bias.items()}
    elif bias is None:
        options.pop("logit_bias", None)
    return options


def _token_key(key: object) -> object:
    if isinstance(key, str):
        try:
            return int(key)
        except ValueError:
            raise ValueError(f"logit_bias keys must be token ids, got {key!r}") from None
    return key


def _include_usage(stream_options: Optional[Mapping[str, Any]]) -> bool:
    if stream_options is None:
        return False
    if not isinstance(stream_options, Mapping):
        raise ValueError("stream_options must be an object")
    include = stream_options.get("include_usage", False)
    if not isinstance(include, bool):
        raise ValueError("stream_options.include_usage must be a boolean")
    return include


# ---------------------------------------------------------------- logprobs


def _piece(model, token: int) -> str:
    """A token's text alone, invalid UTF-8 dropped (as llama-cpp-python shows it)."""
    return model.tokenizer.detokenize_bytes([token]).decode("utf-8", errors="ignore")


class _CompletionLogprobs:
    """The legacy completions `logprobs` object, built a chunk at a time."""

    def __init__(self, model, prompt_chars: int = 0) -> None:
        """`prompt_chars`: where the completion starts in prompt + completion (OpenAI's
        text_offset counts from the prompt's start, as llama-cpp-python's does)."""
        self._model = model
        # the text before the next token, its bytes decoded whole (as llama-cpp-python
        # counts): a character split across tokens counts once, invalid bytes not at all
        self._offset = prompt_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")

    def of(self, chunks: Sequence[GenerationChunk]) -> dict[str, list]:
        """The object of `chunks` (completion tokens, in order, after those of earlier calls)."""
        out: dict[str, list] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for chunk in chunks:
            out["tokens"].append(_piece(self._model, chunk.token_id))
            out["text_offset"].append(self._offset)
            out["token_logprobs"].append(chunk.logprob)
            top: dict[str, float] = {}
            for token, logprob in chunk.top_logprobs or ():
                top.setdefault(_piece(self._model, token), logprob)
            out["top_logprobs"].append(top)
            self._offset += len(self._decoder.decode(self._model.tokenizer.detokenize_bytes([chunk.token_id])))
        return out


def _chat_logprobs(model, chunks: Sequence[GenerationChunk]) -> dict[str, list]:
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


def _check_top_logprobs(name: str, value: object, high: int = 20) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= high:
        raise ValueError(f"{name} must be an integer in [0, {high}], got {value!r}")
    return int(value)


# ---------------------------------------------------------------- completions


def create_completion(
    model,
    prompt: Union[str, Sequence[int]],
    *,
    max_tokens: Optional[int] = 16,
    stream: bool = False,
    logprobs: Optional[int] = None,
    stream_options: Optional[Mapping[str, Any]] = None,
    sampling: Optional[SamplingParams] = None,
    policy: Optional[ExitPolicy] = None,
    speculative: Any = None,
    decoding: Optional[Decoding] = None,
    cancel: Optional[Cancel] = None,
    model_name: Optional[str] = None,
    grammar: Any = None,
    n: int = 1,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    **sampling_options: Any,
) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
    """A text completion of `prompt` as OpenAI's (and llama-cpp-python's) dict, or an
    iterator of its chunk dicts with stream=True. The text and the chunks are
    llama-cpp-python's from the same tokens (bytes that are not UTF-8 dropped; see
    river_cpp.apps.completion_text); usage["completion_tokens"] leaves out the
    end-of-turn token that ended the text, as llama-cpp-python counts.

    n: that many choices (index 0..n-1), generated one after another; with a seed,
    choice i samples with seed + i (see _n_choices).
    logits_processor / stopping_criteria: llama-cpp-python's hooks (a callable or a
    list), run on each step's logits on the host: the call decodes plainly, and
    usage["river"]["plain_decoding"] says why when it would have drafted.

    grammar: a llama_cpp.LlamaGrammar, GBNF text or a compiled Grammar: only text it
    allows (finish_reason "no_legal_token" where it allows no token at all).

    Sampling: `sampling` (a SamplingParams) and/or its settings one by one
    (temperature, top_p, top_k, min_p, repeat_penalty, seed, stop, ...); defaults are
    llama-cpp-python's (river_cpp.decoding.decision.SAMPLING_DEFAULTS["completion"]).
    max_tokens None (or <= 0) generates until the context is full; a prompt that leaves no room raises
    ContextOverflowError. logprobs=n adds the legacy logprobs object (n most likely
    tokens at each step). River options for this call only: policy (an ExitPolicy:
    a lossy decode), speculative (False: plain decoding; a river_cpp.Speculative:
    that draft); by default the model's (the backbone's own tokens, drafted); or
    `decoding`, the three already resolved (river_cpp.decoding.decision); cancel
    (a threading.Event, set from any thread) stops the generation with finish_reason
    "cancelled". usage["river"] holds the mean exit layer, the share of backbone
    layers avoided, the exit-depth histogram, timings and speculative counts;
    usage["prompt_tokens_details"]["cached_tokens"] the prompt cache's hits. With
    stream_options={"include_usage": True} a last chunk with no choices carries usage.
    Every option is checked before the call returns; the model's lock is held
    while the generation runs (a stream: until it is exhausted or closed).
    """
    n_top = _check_top_logprobs("logprobs", logprobs)
    include_usage = _include_usage(stream_options)
    decoding = _decoding(model, "completion", decoding, policy, speculative, sampling, sampling_options)
    if _check_n(n) > 1:
        one = dict(
            max_tokens=max_tokens,
            logprobs=logprobs,
            stream_options=stream_options,
            cancel=cancel,
            model_name=model_name,
            grammar=grammar,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
        )
        return _n_choices(
            lambda d: create_completion(model, prompt, stream=stream, decoding=d, **one), n, decoding, stream
        )
    generation, run = _start(
        model,
        prompt,
        max_tokens=max_tokens,
        decoding=decoding,
        logprobs=n_top,
        grammar=request_grammar(model, grammar=grammar),
        hooks={"logits_processor": logits_processor, "stopping_criteria": stopping_criteria},
    )
    pieces = _run(model, generation, run, cancel)
    base = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": _model_name(model, model_name),
    }
    if stream:
        logprobs_of = _CompletionLogprobs(model, _prompt_chars(model, prompt)) if n_top is not None else None
        return _completion_chunks(model, pieces, run, base, logprobs_of, include_usage)
    for _ in pieces:  # the text is run.text, whole
        pass
    return {
        **base,
        "choices": [
            {
                "text": run.text,
                "index": 0,
                "logprobs": _CompletionLogprobs(model, _prompt_chars(model, prompt)).of(run.chunks)
                if n_top is not None
                else None,
                "finish_reason": run.finish_reason,
            }
        ],
        "usage": _usage(model, run),
    }


# The most choices one call may ask for (n).
MAX_CHOICES = 16


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_CHOICES:
        raise ValueError(f"n must be an integer in [1, {MAX_CHOICES}], got {n!r}")
    return int(n)


def _n_choices(call: Any, n: int, decoding: Decoding, stream: bool) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
    """n answers of `call(decoding)` as one answer with n choices. Choice i samples
    with the call's seed + i (a seed None stays None: fresh entropy each); greedy
    choices are all the same text. usage counts the prompt once and every choice's
    completion tokens; usage["river"] is the first choice's."""
    seed = decoding.sampling.seed
    decodings = [
        dataclasses.replace(decoding, sampling=decoding.sampling.replace(seed=None if seed is None else seed + i))
        for i in range(n)
    ]
    if not stream:
        answers = [call(d) for d in decodings]
        merged = answers[0]
        merged["choices"] = [{**a["choices"][0], "index": i} for i, a in enumerate(answers)]
        merged["usage"] = _merged_usage([a["usage"] for a in answers])
        return merged
    return _n_chunks(call, decodings)


def _merged_usage(usages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    merged = dict(usages[0])
    merged["completion_tokens"] = sum(u["completion_tokens"] for u in usages)
    merged["total_tokens"] = merged["prompt_tokens"] + merged["completion_tokens"]
    return merged


def _n_chunks(call: Any, decodings: Sequence[Decoding]) -> Iterator[dict[str, Any]]:
    """The chunks of each choice in turn, under the first one's id; one usage chunk
    (when asked for) at the end."""
    base: Optional[dict[str, Any]] = None
    usages: list[Mapping[str, Any]] = []
    for i, decoding in enumerate(decodings):
        chunks = call(decoding)
        try:
            for chunk in chunks:
                base = base or {k: chunk[k] for k in ("id", "object", "created", "model")}
                if not chunk["choices"]:
                    usages.append(chunk["usage"])
                    continue
                for choice in chunk["choices"]:
                    choice["index"] = i
                yield {**chunk, "id": base["id"], "created": base["created"]}
        finally:
            chunks.close()
    if usages and base is not None:
        yield {**base, "choices": [], "usage": _merged_usage(usages)}


def _prompt_chars(model, prompt: Union[str, Sequence[int]]) -> int:
    return len(prompt) if isinstance(prompt, str) else len(model.detokenize(prompt))


def _completion_chunks(
    model,
    pieces: Iterator[_Piece],
    run: _Run,
    base: dict[str, Any],
    logprobs: Optional[_CompletionLogprobs],
    include_usage: bool,
) -> Iterator[dict[str, Any]]:
    """A chunk per piece (an empty text too, as llama-cpp-python's), then the one that
    gives the finish reason."""
    extra = {"usage": None} if include_usage else {}

    def chunk(text: str, of: Optional[Sequence[GenerationChunk]], finish_reason: Optional[str]) -> dict[str, Any]:
        choice = {
            "text": text,
            "index": 0,
            "logprobs": logprobs.of(of) if logprobs is not None and of is not None else None,
            "finish_reason": finish_reason,
        }
        return {**base, "choices": [choice], **extra}

    try:
        for piece in pieces:
            yield chunk(piece.text, piece.chunks, None)
        yield chunk("", None, run.finish_reason)
        if include_usage:
            yield {**base, "choices": [], "usage": _usage(model, run)}
    finally:
        pieces.close()


# ---------------------------------------------------------------- chat


def chat_prompt(
    model,
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
    model,
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
    if not isinstance(logprobs, bool):
        raise ValueError(f"logprobs must be a boolean, got {logprobs!r}")
    n_top = _check_top_logprobs("top_logprobs", top_logprobs)
    if n_top is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    include_usage = _include_usage(stream_options)
    request = check_tools(tools, tool_choice)
    template = None
    if chat_template_source is not None or (request is not None and request.parsed):
        template = _template(model, chat_template_source)
    syntax = None
    if request is not None and request.parsed:
        syntax = known_call_syntax(template.source) or ("json" if request.constrained else None)
    decoding = _decoding(model, "chat", decoding, policy, speculative, sampling, sampling_options)
    if _check_n(n) > 1:
        one = dict(
            max_tokens=max_tokens,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            stream_options=stream_options,
            cancel=cancel,
            model_name=model_name,
            grammar=grammar,
            response_format=response_format,
            tools=tools,
            tool_choice=tool_choice,
            template_engine=template_engine,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            chat_template_source=chat_template_source,
        )
        return _n_choices(
            lambda d: create_chat_completion(model, messages, stream=stream, decoding=d, **one), n, decoding, stream
        )
    prompt = chat_prompt(
        model,
        messages,
        tools=request.tools if request is not None else None,
        template_engine="jinja" if chat_template_source is not None else template_engine,
        template=template,
    )
    generation, run = _start(
        model,
        prompt,
        max_tokens=max_tokens,
        decoding=decoding,
        logprobs=(n_top or 0) if logprobs else None,
        grammar=_chat_grammar(model, request, syntax, grammar, response_format),
        # a rendered template writes its own BOS where it wants one (llama-cpp-python's rule)
        add_bos=not renders_template(
            messages,
            tools=tools,
            template_engine="jinja" if chat_template_source is not None else template_engine,
        ),
        hooks={"logits_processor": logits_processor, "stopping_criteria": stopping_criteria},
    )
    pieces = _run(model, generation, run, cancel)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": _model_name(model, model_name)}
    if stream:
        named = request.named if request is not None else None
        return _chat_chunks(model, pieces, run, base, logprobs, include_usage, syntax, named)
    for _ in pieces:  # the text is run.text, whole
        pass
    message: dict[str, Any] = {"role": "assistant", "content": run.text}
    finish_reason = run.finish_reason
    if syntax is not None:
        content, calls = parse_tool_calls(syntax, run.text, named=request.named if request is not None else None)
        if calls:
            message = {"role": "assistant", "content": content, "tool_calls": calls}
            if syntax == "json":  # llama-cpp-python's forced call also fills the legacy field
                message["function_call"] = dict(calls[0]["function"])
            finish_reason = "tool_calls"
    return {
        **base,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": _chat_logprobs(model, run.chunks) if logprobs else None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": _usage(model, run),
    }


def _template(model, source: Optional[str]) -> ChatTemplate:
    """The chat template a call renders: `source` (a Jinja2 template), or the GGUF's."""
    if source is None:
        return chat_template(model.tokenizer)
    return ChatTemplate(model.tokenizer, source=source)


def _chat_grammar(
    model,
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
    model,
    pieces: Iterator[_Piece],
    run: _Run,
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
            yield {**base, "choices": [], "usage": _usage(model, run)}
    finally:
        pieces.close()
