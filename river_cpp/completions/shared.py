"""What text and chat completions share: one generation from a request's options
to its pieces of text, OpenAI's usage with River's `river` block, logprob checks, and
n choices of one request.

The decode loop is river_cpp.decoding.generation's; text and chat completions are
river_cpp.completions.text's and .chat's.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Protocol, Sequence, Union

from river_cpp.completions.output_text import CompletionText, TextPiece
from river_cpp.decoding.decision import Decoding, check_alone
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationChunk, GenerationStream, tokens_per_second
from river_cpp.decoding.grammar import Grammar
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.engine.compute.tokenizer import Tokenizer

# finish_reason of a generation stopped through `cancel` (not one of OpenAI's).
CANCELLED = "cancelled"


class CompletionModel(Protocol):
    """What completions ask of a model, and all they ask: its files' name, sizes,
    tokenizer, how a call decodes, and one generation (river_cpp.RiverModel is one)."""

    model_path: Any

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_layer(self) -> int: ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def decoding(self, kind: str = "generate", **options: Any) -> Decoding:
        """How a call of entry `kind` with these options decodes (decision.decide)."""
        ...

    def generate(self, prompt: Union[str, Sequence[int]], *, stream: bool = False, **options: Any) -> Any:
        """One generation (a GenerationStream with stream=True)."""
        ...


class Cancel(Protocol):
    """Anything with is_set(), e.g. a threading.Event: set it to stop a generation."""

    def is_set(self) -> bool: ...


# ---------------------------------------------------------------- one generation


@dataclass
class Run:
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
class Piece:
    """One text chunk of a stream and the generated tokens it gives (their logprobs)."""

    text: str
    chunks: list[GenerationChunk]


def run_pieces(model: CompletionModel, stream: GenerationStream, run: Run, cancel: Optional[Cancel]) -> Iterator[Piece]:
    """The text pieces of `stream` (which holds the model's lock while it runs), cut
    as llama-cpp-python's stream cuts them (river_cpp.apps.completion_text); fills `run`.
    The end-of-turn token that ends a generation is no completion token: no piece
    gives it, and usage does not count it (llama-cpp-python's rule)."""
    given = 0  # chunks of run.chunks a piece gave

    def pieces(cut: list[TextPiece]) -> Iterator[Piece]:
        nonlocal given
        for piece in cut:
            yield Piece(piece.text, run.chunks[given : given + piece.n_tokens])
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


def start(
    model: CompletionModel,
    prompt: Union[str, Sequence[int]],
    *,
    max_tokens: Optional[int],
    decoding: Decoding,
    logprobs: Optional[int],
    grammar: Optional[Grammar] = None,
    add_bos: bool = True,
    hooks: Optional[Mapping[str, Any]] = None,
) -> tuple[GenerationStream, Run]:
    """Check every option and tokenize; the (not yet running) stream and its record.
    `hooks`: logits_processor / stopping_criteria (llama-cpp-python's), which make a
    drafting call decode plainly."""
    hooks = {name: value for name, value in (hooks or {}).items() if value is not None}
    if isinstance(prompt, str):
        prompt_ids = model.tokenize(prompt, add_bos=add_bos, special=True)
    else:
        prompt_ids = list(prompt)
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
    return stream, Run(prompt_ids=prompt_ids, plain_reason=plain_reason, output=output)


def call_decoding(
    model: CompletionModel,
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


def usage(model: CompletionModel, run: Run) -> dict[str, Any]:
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
        "prompt_tokens_per_second": round(tokens_per_second(n_prompt - run.cached_tokens, prompt_seconds), 2),
        # the first token comes from the prefill's logits
        "generation_tokens_per_second": round(tokens_per_second(n_computed - 1, generation_seconds), 2),
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


def served_name(model: CompletionModel, name: Optional[str]) -> str:
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


def usage_in_stream(stream_options: Optional[Mapping[str, Any]]) -> bool:
    if stream_options is None:
        return False
    if not isinstance(stream_options, Mapping):
        raise ValueError("stream_options must be an object")
    include = stream_options.get("include_usage", False)
    if not isinstance(include, bool):
        raise ValueError("stream_options.include_usage must be a boolean")
    return include


# ---------------------------------------------------------------- logprobs


def token_text(model: CompletionModel, token: int) -> str:
    """A token's text alone, invalid UTF-8 dropped (as llama-cpp-python shows it)."""
    return model.tokenizer.detokenize_bytes([token]).decode("utf-8", errors="ignore")


def check_top_logprobs(name: str, value: object, high: int = 20) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= high:
        raise ValueError(f"{name} must be an integer in [0, {high}], got {value!r}")
    return int(value)


# ---------------------------------------------------------------- completions


# The most choices one call may ask for (n).
MAX_CHOICES = 16


def check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_CHOICES:
        raise ValueError(f"n must be an integer in [1, {MAX_CHOICES}], got {n!r}")
    return int(n)


def n_choices(call: Any, n: int, decoding: Decoding, stream: bool) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
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
