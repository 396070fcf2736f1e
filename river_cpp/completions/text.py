"""Text completions (llama-cpp-python's create_completion): a prompt in, OpenAI's
text_completion dict out, or its chunks when streaming, with logprobs as
llama-cpp-python gives them."""

from __future__ import annotations

import codecs
import functools
import time
import uuid
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

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
    token_text,
    usage,
    usage_in_stream,
)
from river_cpp.completions.structured import request_grammar
from river_cpp.decoding.decision import Decoding
from river_cpp.decoding.generation import GenerationChunk
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.compute.policy import ExitPolicy


class _CompletionLogprobs:
    """The legacy completions `logprobs` object, built a chunk at a time."""

    def __init__(self, model: CompletionModel, prompt_chars: int = 0) -> None:
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
            out["tokens"].append(token_text(self._model, chunk.token_id))
            out["text_offset"].append(self._offset)
            out["token_logprobs"].append(chunk.logprob)
            top: dict[str, float] = {}
            for token, logprob in chunk.top_logprobs or ():
                top.setdefault(token_text(self._model, token), logprob)
            out["top_logprobs"].append(top)
            self._offset += len(self._decoder.decode(self._model.tokenizer.detokenize_bytes([chunk.token_id])))
        return out


def create_completion(
    model: CompletionModel,
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
    choice i samples with seed + i (see n_choices).
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
    n_top = check_top_logprobs("logprobs", logprobs)
    include_usage = usage_in_stream(stream_options)
    decoding = call_decoding(model, "completion", decoding, policy, speculative, sampling, sampling_options)
    one = functools.partial(
        _one_completion,
        model,
        prompt,
        stream=stream,
        max_tokens=max_tokens,
        n_top=n_top,
        include_usage=include_usage,
        cancel=cancel,
        model_name=model_name,
        grammar=grammar,
        hooks={"logits_processor": logits_processor, "stopping_criteria": stopping_criteria},
    )
    if check_n(n) > 1:
        return n_choices(one, n, decoding, stream)
    return one(decoding)


def _one_completion(
    model: CompletionModel,
    prompt: Union[str, Sequence[int]],
    decoding: Decoding,
    *,
    stream: bool,
    max_tokens: Optional[int],
    n_top: Optional[int],
    include_usage: bool,
    cancel: Optional[Cancel],
    model_name: Optional[str],
    grammar: Any,
    hooks: Mapping[str, Any],
) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
    """One choice of a completion call, decoded by `decoding` (its options checked
    by create_completion): its chunks, or its dict."""
    generation, run = start(
        model,
        prompt,
        max_tokens=max_tokens,
        decoding=decoding,
        logprobs=n_top,
        grammar=request_grammar(model, grammar=grammar),
        hooks=hooks,
    )
    pieces = run_pieces(model, generation, run, cancel)
    base = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served_name(model, model_name),
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
        "usage": usage(model, run),
    }


def _prompt_chars(model: CompletionModel, prompt: Union[str, Sequence[int]]) -> int:
    return len(prompt) if isinstance(prompt, str) else len(model.detokenize(prompt))


def _completion_chunks(
    model: CompletionModel,
    pieces: Iterator[Piece],
    run: Run,
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
            yield {**base, "choices": [], "usage": usage(model, run)}
    finally:
        pieces.close()
