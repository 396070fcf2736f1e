"""Generation: a prompt -> sampled tokens -> text, with stop conditions and streaming.

Owns the decode loop's policy: when to stop, how text is cut at stop strings and
streamed without broken characters, how it is timed. The model owns compute, the
sampler the choice of each token. Layered as in mlx-lm: generate_step (token ids,
forever; or its speculative twin) -> stream_generate (text, stops, timing) ->
generate (options, results). Every tool that generates (CLI, measurement, server)
runs this one loop.
"""

from __future__ import annotations

import codecs
import numbers
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from river_cpp.decoding.decision import Decoding, SpeculativeOption, check_alone, decide
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.grammar import Grammar
from river_cpp.decoding.sampling import NoLegalToken, Sampler, SamplingParams
from river_cpp.decoding.speculative import Speculative, SpeculativeStats, speculative_loop
from river_cpp.decoding.steps import Step, decode_one_token, prefill_requests
from river_cpp.engine.compute.backbone import Backbone
from river_cpp.engine.compute.context import check_fits
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.requests import Call, Forward, Requests, alone, call

# finish_reason of a generation whose grammar allowed no token at some point (the
# text so far is what it allowed; not one of OpenAI's reasons).
NO_LEGAL_TOKEN = "no_legal_token"


@dataclass
class GenerationResult:
    """A finished generation.

    token_ids holds every sampled token, including an end-of-generation token or the
    token that completed a stop string; `text` holds neither (nor the stop string).
    finish_reason is "stop" (end-of-generation token or stop string), "length"
    (max_tokens reached, or the context is full) or NO_LEGAL_TOKEN (the grammar
    allowed no token).
    prompt_seconds is the prefill and the first token's sampling; generation_seconds
    the decode steps that produced the other tokens (time spent by a streaming
    consumer between chunks is not counted).
    exit_layers[i] is the number of backbone layers run by the forward whose logits
    chose token_ids[i] (the prompt's for the first token; n_layer: never left).
    speculative holds drafted/accepted counts when the generation was speculative.
    cached_tokens is how many leading prompt tokens were reused from the cache (the
    sequence left by the last call, or the prompt cache) instead of computed.
    """

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    finish_reason: str
    prompt_seconds: float
    generation_seconds: float
    exit_layers: list[int] = field(default_factory=list)
    n_layer: int = 0
    speculative: Optional[SpeculativeStats] = None
    cached_tokens: int = 0

    @property
    def exit_stats(self) -> ExitStats:
        """Mean exit layer, histogram and backbone evaluations avoided."""
        return ExitStats.from_exit_layers(self.exit_layers, self.n_layer)

    @property
    def prompt_tokens_per_second(self) -> float:
        """Prompt tokens computed per second of prefill: those not taken from the
        cache (0.0 when nothing was timed)."""
        return tokens_per_second(len(self.prompt_token_ids) - self.cached_tokens, self.prompt_seconds)

    @property
    def generation_tokens_per_second(self) -> float:
        """Tokens per second of the decode steps (0.0 when there were none).

        The first token comes from the prefill's logits, so the decode steps
        produced len(token_ids) - 1 tokens.
        """
        return tokens_per_second(len(self.token_ids) - 1, self.generation_seconds)


# llama-cpp-python's hooks: logits_processor(input_ids, scores) -> scores, and
# stopping_criteria(input_ids, scores) -> bool (a callable or a list of them).
LogitsHook = Callable[[np.ndarray, np.ndarray], Any]


def _hooks(hooks: Union[LogitsHook, Sequence[LogitsHook], None], name: str) -> tuple[LogitsHook, ...]:
    """A hook or a list of hooks as a tuple (empty for None); TypeError for anything else."""
    if hooks is None:
        return ()
    hooks = (hooks,) if callable(hooks) else tuple(hooks)
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"{name} must be a callable or a list of callables, got {type(hook).__name__}")
    return hooks


class _Processed:
    """A sampler that runs logits processors on each position's logits first (as
    llama-cpp-python does, before its penalties): processor(input_ids, scores) gets
    the sequence so far (np.intc) and a float32 copy of the logits, and returns the
    scores to sample from."""

    def __init__(self, sampler: Sampler, processors: tuple[LogitsHook, ...]) -> None:
        self.sampler = sampler
        self.params = sampler.params
        self._processors = processors

    def __call__(self, logits: np.ndarray, history: Sequence[int], constraint: Any = None) -> int:
        ids = np.asarray(history, dtype=np.intc)
        scores = np.array(logits, dtype=np.float32)
        for processor in self._processors:
            out = processor(ids, scores)
            scores = scores if out is None else np.asarray(out, dtype=np.float32).reshape(scores.shape)
        return self.sampler(scores, history, constraint)


def tokens_per_second(count: int, seconds: float) -> float:
    """`count` tokens over `seconds`; 0.0 where either is not positive (nothing was
    computed, or nothing timed). The one definition of a speed that every report uses."""
    return count / seconds if count > 0 and seconds > 0 else 0.0


@dataclass
class GenerationChunk:
    """One sampled token, the text it made safe to show (possibly "") and the
    backbone layers run by the forward that chose it. With the `logprobs` option:
    the token's log-probability under the model's logits (before sampling's
    penalties and temperature) and the `logprobs` most likely (token, logprob).
    cached_tokens: the prompt positions the forward that chose it took from the cache
    (the prompt cache's hits; nonzero only on the first chunk)."""

    text: str
    token_id: int
    exit_layer: int
    logprob: Optional[float] = None
    top_logprobs: Optional[list[tuple[int, float]]] = None
    cached_tokens: int = 0


def _logprobs(logits: np.ndarray, token: int, n_top: int) -> tuple[float, list[tuple[int, float]]]:
    """log softmax(logits)[token] and the n_top most likely (token, logprob)."""
    shifted = logits.astype(np.float64) - float(logits.max())
    log_z = float(np.log(np.exp(shifted).sum()))
    top = np.argpartition(-shifted, n_top - 1)[:n_top] if n_top > 0 else np.empty(0, dtype=np.int64)
    top = top[np.argsort(-shifted[top], kind="stable")]
    return float(shifted[token]) - log_z, [(int(t), float(shifted[t]) - log_z) for t in top]


class GenerationStream:
    """The chunks of a streamed generation; `.result` once they are exhausted.

    >>> stream = model.generate("Once upon a time", stream=True)
    >>> for chunk in stream:
    ...     print(chunk.text, end="", flush=True)
    >>> stream.result.finish_reason
    """

    def __init__(self, chunks: Iterator[GenerationChunk]) -> None:
        """`chunks`: an iterator of the chunks whose StopIteration carries the result,
        and that has close() (a generator, or a scheduler's river_cpp.engine.compute.scheduler.Stream)."""
        self._chunks = chunks
        self._result: Optional[GenerationResult] = None

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> GenerationChunk:
        try:
            return next(self._chunks)
        except StopIteration as finished:
            self._result = finished.value
            raise

    @property
    def result(self) -> GenerationResult:
        """The GenerationResult; raises RuntimeError before the stream is exhausted."""
        if self._result is None:
            raise RuntimeError("the generation is still running: iterate the stream to its end first")
        return self._result

    def close(self) -> None:
        """Stop generating; the model's cache keeps what was computed so far."""
        self._chunks.close()


# ---------------------------------------------------------------- token loop


def decode_loop(
    model: Backbone,
    prompt_ids: Sequence[int],
    sampler: Callable[[np.ndarray, Sequence[int]], int],
    *,
    policy: Union[ExitPolicy, Callable[[int], ExitPolicy], None] = None,
    speculative: Optional[Speculative] = None,
    speculative_stats: Optional[SpeculativeStats] = None,
    grammar: Optional[Grammar] = None,
) -> Requests:
    """Tokens continuing `prompt_ids`, one Step yielded at a time, until the caller stops;
    a request loop (river_cpp.engine.compute.requests): it yields what it asks of its sequence
    too, and `model` is read only for what every sequence shares (sizes, tokenizer).

    `sampler(logits, history) -> token` chooses each token (a Sampler, or any callable:
    measurement forces tokens this way). `policy`: the exit policy of this loop's
    forwards (None: the model's own), or a function: policy(i) is that of the forward
    whose logits choose token i (0: the prompt's; measurement's controls vary it).
    With `speculative`, rounds of drafted tokens
    are verified by the backbone (river_cpp.decoding.speculative); the tokens are the
    backbone's, and `speculative_stats` (if given) counts drafts and acceptances.
    `grammar`: only tokens it allows (the sampler is then asked with its state);
    raises NoLegalToken after the last token when it allows none.
    Lazy: the forward after a token is asked only when the loop is resumed after it.
    Ends when the prompt and the tokens yielded fill the context.
    """
    if speculative is not None:
        yield from speculative_loop(model, prompt_ids, sampler, speculative, speculative_stats, grammar=grammar)
        return
    policy_at = policy if callable(policy) else (lambda i: policy)
    state = grammar.start() if grammar is not None else None
    history = list(prompt_ids)
    logits, cached_tokens = yield from prefill_requests(prompt_ids, policy=policy_at(0))
    while True:
        if state is None:
            token = sampler(logits, history)
        else:
            token = sampler(logits, history, state)
            state.accept(token)
        history.append(token)
        exit_layers = yield call("last_exit_layers")
        yield Step(token, logits, int(exit_layers[-1]), cached_tokens)
        cached_tokens = 0
        # The cache holds everything before `token`; with it the sequence is full.
        if (yield call("n_past")) + 1 >= model.n_ctx:
            return
        logits = yield from decode_one_token(token, policy=policy_at(len(history) - len(prompt_ids)))


def generate_step(model: Backbone, prompt_ids: Sequence[int], sampler: Callable, **options: Any) -> Iterator[Step]:
    """decode_loop run on `model` alone, on this thread (its options): the Steps."""
    return alone(model, decode_loop(model, prompt_ids, sampler, **options))


# ---------------------------------------------------------------- text


class _StoppingText:
    """Bytes of tokens -> text, cut at the first stop string.

    push() returns only text that is safe to show: bytes of a character split
    across tokens wait for the rest, and text that may be the start of a stop
    string waits until it is known not to be one.
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = list(stop)
        self.text = ""
        self._n_shown = 0
        self.stopped = False

    def push(self, piece: bytes, *, final: bool) -> str:
        """Add one token's bytes; `final` when no more will come. The new safe text."""
        self.text += self._decoder.decode(piece, final=final)
        stop_at = self._first_stop_index()
        if stop_at is not None:
            self.text = self.text[:stop_at]
            self.stopped = True
            safe_end = stop_at
        elif final:
            safe_end = len(self.text)
        else:
            safe_end = len(self.text) - self._partial_stop_length()
        new_text = self.text[self._n_shown : safe_end]
        self._n_shown = safe_end
        return new_text

    def _first_stop_index(self) -> Optional[int]:
        # A stop string cannot start in text already shown: that text was held back
        # while it could still begin one.
        found = [i for i in (self.text.find(s, self._n_shown) for s in self._stop) if i >= 0]
        return min(found) if found else None

    def _partial_stop_length(self) -> int:
        """Length of the longest unshown suffix of the text that begins a stop string."""
        unshown = len(self.text) - self._n_shown
        longest = 0
        for stop in self._stop:
            for length in range(min(len(stop) - 1, unshown), longest, -1):
                if self.text.endswith(stop[:length]):
                    longest = length
                    break
        return longest


# ---------------------------------------------------------------- generate


def _generate_chunks(
    model: Backbone,
    prompt_ids: list[int],
    sampler: Sampler,
    max_new_tokens: int,
    policy: Optional[ExitPolicy],
    speculative: Optional[Speculative],
    logprobs: Optional[int] = None,
    grammar: Optional[Grammar] = None,
    stopping: tuple[LogitsHook, ...] = (),
) -> Requests:
    """One chunk per sampled token; returns the GenerationResult. A request loop
    (river_cpp.engine.compute.requests): its decode loop's requests pass through it. `stopping`:
    criteria asked before each token is kept, with the sequence before it and the
    logits that chose it (llama-cpp-python's rule: a token they stop at is dropped)."""
    tokenizer = model.tokenizer
    text = _StoppingText(sampler.params.stop)
    token_ids: list[int] = []
    exit_layers: list[int] = []
    seconds: list[float] = []
    finish_reason = "length"
    cached_tokens = 0
    stats = SpeculativeStats() if speculative is not None else None
    steps = decode_loop(
        model, prompt_ids, sampler, policy=policy, speculative=speculative, speculative_stats=stats, grammar=grammar
    )
    result: Any = None
    error: Optional[BaseException] = None
    start = time.perf_counter()  # each Step is timed from the loop's resumption, not the reader's time
    while True:
        try:
            item = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration:
            break
        except NoLegalToken:
            finish_reason = NO_LEGAL_TOKEN
            break
        result, error = None, None
        if isinstance(item, (Forward, Call)):
            try:
                result = yield item
            except Exception as failed:  # noqa: BLE001 - thrown on into the loop, where it asked
                error = failed
            continue
        step, step_seconds = item, time.perf_counter() - start
        cached_tokens += step.cached_tokens
        if stopping:
            ids = np.asarray([*prompt_ids, *token_ids], dtype=np.intc)
            if any(bool(stop(ids, step.logits)) for stop in stopping):
                finish_reason = "stop"
                break
        token_ids.append(step.token)
        exit_layers.append(step.exit_layer)
        seconds.append(step_seconds)
        end_of_generation = tokenizer.is_end_of_generation(step.token)
        last = end_of_generation or len(token_ids) == max_new_tokens
        piece = b"" if end_of_generation else tokenizer.detokenize_bytes([step.token])
        chunk = GenerationChunk(
            text.push(piece, final=last), step.token, step.exit_layer, cached_tokens=step.cached_tokens
        )
        if logprobs is not None:
            chunk.logprob, chunk.top_logprobs = _logprobs(step.logits, step.token, logprobs)
        yield chunk
        if end_of_generation or text.stopped:
            finish_reason = "stop"
            break
        if last:
            break
        start = time.perf_counter()
    steps.close()
    return GenerationResult(
        text=text.text,
        token_ids=token_ids,
        prompt_token_ids=prompt_ids,
        finish_reason=finish_reason,
        prompt_seconds=seconds[0] if seconds else 0.0,
        generation_seconds=sum(seconds[1:]),
        exit_layers=exit_layers,
        n_layer=model.n_layer,
        speculative=stats,
        cached_tokens=cached_tokens,
    )


def generation_requests(
    model: Backbone,
    prompt: Union[str, Sequence[int]],
    *,
    max_tokens: int = 128,
    logprobs: Optional[int] = None,
    decoding: Optional[Decoding] = None,
    policy: Optional[ExitPolicy] = None,
    speculative: SpeculativeOption = None,
    sampling: Optional[SamplingParams] = None,
    grammar: Optional[Grammar] = None,
    logits_processor: Union[LogitsHook, Sequence[LogitsHook], None] = None,
    stopping_criteria: Union[LogitsHook, Sequence[LogitsHook], None] = None,
    **sampling_options: Any,
) -> Requests:
    """The request loop (river_cpp.engine.compute.requests) of a continuation of `prompt` (text,
    or token ids used as they are): it yields GenerationChunks and returns the
    GenerationResult; see generate. `model` is read only for what its sequences share.
    `decoding`: how it decodes, as resolved by river_cpp.decoding.decision; without one,
    the options are resolved here over the model's policy (no draft, SamplingParams'
    defaults). Options are checked, and the prompt tokenized, before anything runs.
    `logits_processor` / `stopping_criteria` (llama-cpp-python's hooks) run on each
    step's logits on the host, so a call with either decodes plainly (no drafts)."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, numbers.Integral) or max_tokens <= 0:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if logprobs is not None and (
        isinstance(logprobs, bool) or not isinstance(logprobs, numbers.Integral) or not 0 <= logprobs <= model.n_vocab
    ):
        raise ValueError(f"logprobs must be an integer in [0, n_vocab] or None, got {logprobs!r}")
    if decoding is None:
        decoding = decide(
            Decoding(model.policy, None, SamplingParams()),
            n_layer=model.n_layer,
            has_river=model.has_river,
            policy=policy,
            speculative=speculative,
            sampling=sampling,
            **sampling_options,
        )
    else:
        check_alone(policy, speculative, sampling, sampling_options)
    params = decoding.sampling
    if params.seed is None and model.seed is not None:
        params = params.replace(seed=model.seed)
    if grammar is not None and not isinstance(grammar, Grammar):
        raise TypeError(f"grammar must be a river_cpp.decoding.grammar.Grammar, got {type(grammar).__name__}")
    processors = _hooks(logits_processor, "logits_processor")
    stopping = _hooks(stopping_criteria, "stopping_criteria")
    speculative = None if processors or stopping else decoding.speculative
    prompt_ids = _prompt_ids(model, prompt)
    sampler = Sampler(params, n_prompt=len(prompt_ids))
    sampler.check_vocab(model.n_vocab)
    if processors:
        sampler = _Processed(sampler, processors)
    max_new_tokens = min(int(max_tokens), model.n_ctx - len(prompt_ids))
    chunks = _generate_chunks(
        model,
        prompt_ids,
        sampler,
        max_new_tokens,
        decoding.policy,
        speculative,
        None if logprobs is None else int(logprobs),
        grammar,
        stopping,
    )
    return chunks


def stream_generate(model: Backbone, prompt: Union[str, Sequence[int]], **options: Any) -> GenerationStream:
    """The GenerationStream of generation_requests(model, prompt, **options), run on
    `model` alone on the reader's thread (a facade runs it on its scheduler)."""
    return GenerationStream(alone(model, generation_requests(model, prompt, **options)))


def generate(
    model: Backbone, prompt: Union[str, Sequence[int]], *, stream: bool = False, **options: Any
) -> Union[GenerationResult, GenerationStream]:
    """Generate a continuation of `prompt` (text, or token ids used as they are).

    Options: max_tokens (128); the sampling settings of river_cpp.SamplingParams, as
    `sampling=SamplingParams(...)` or one by one (temperature (0: greedy), top_k (40),
    top_p (0.95), min_p (0.05), typical_p (1), repeat_penalty (1), frequency_penalty
    (0), presence_penalty (0), repeat_last_n (64), logit_bias, seed (None:
    model.seed), stop (strings)); grammar (a river_cpp.decoding.grammar.Grammar: only
    the tokens it allows; finish_reason NO_LEGAL_TOKEN where it allows none); policy
    (an ExitPolicy for this call; None: the model's); speculative (True, or a
    river_cpp.Speculative: drafts verified by the backbone; the tokens are the
    backbone's own); or `decoding`, all three resolved
    (river_cpp.decoding.decision); logprobs (None; n: each chunk
    carries its token's logprob and the n most likely tokens' logprobs).
    Continues from the longest prefix of the prompt the cache (or the prompt cache)
    holds (see model.cached_prefix; result.cached_tokens); the rest of the cache is
    dropped. Ends at an
    end-of-generation token or at the first of the `stop` strings (the text
    includes neither), after `max_tokens` tokens, or when prompt and generation
    fill the context. With stream=True a GenerationStream of GenerationChunk is
    returned and its `.result` is the GenerationResult once the stream is
    exhausted. Raises ValueError for invalid options and ContextOverflowError for a
    prompt that leaves no room in the context, before anything runs.
    """
    chunk_stream = stream_generate(model, prompt, **options)
    if stream:
        return chunk_stream
    for _ in chunk_stream:
        pass
    return chunk_stream.result


def _prompt_ids(model: Backbone, prompt: Union[str, Sequence[int]]) -> list[int]:
    """The prompt's token ids, checked to fit the context with room for one token."""
    if isinstance(prompt, str):
        # As llama-cpp-python's create_completion: special tokens in the text are
        # parsed (chat templates write them as text), and BOS is prepended only when
        # the model's metadata asks for it (add_bos lets llama.cpp decide).
        ids = model.tokenize(prompt, add_bos=True, special=True)
    else:
        ids = list(prompt)
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
            raise ValueError("a token-id prompt must contain integers only")
        ids = [int(t) for t in ids]
        if any(not 0 <= t < model.n_vocab for t in ids):
            raise ValueError(f"prompt token ids must be in [0, {model.n_vocab})")
    if not ids:
        raise ValueError("the prompt is empty: it has no tokens")
    check_fits(len(ids), model.n_ctx)
    return ids
