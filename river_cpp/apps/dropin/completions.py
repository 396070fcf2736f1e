"""Llama's completions, as llama-cpp-python has them: create_completion (and
__call__), create_chat_completion and its openai-package form, with llama-cpp-python's
arguments, defaults and seed rule, on river_cpp.completions.

A base class of river_cpp.apps.dropin.llama.Llama, reading the model, seed and chat template
that Llama holds; it translates a call's arguments and frames the text (echo, suffix),
and leaves the request itself to river_cpp.completions.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from river_cpp.apps.dropin import compat
from river_cpp.apps.dropin.compat import REFUSED_SAMPLING
from river_cpp.completions import create_chat_completion, create_completion
from river_cpp.model import RiverModel


class CompletionCalls:
    """create_completion / create_chat_completion on a Llama's model."""

    # what river_cpp.apps.dropin.llama.Llama gives these calls
    _model: RiverModel
    _seed: Optional[int]
    _template_source: Optional[str]
    last_n_tokens_size: int  # and its detokenize()

    def _sampling(self, seed: Optional[int], sampling: Mapping[str, Any]) -> dict[str, Any]:
        """A call's sampling options in river-cpp's names (refused ones checked)."""
        options = dict(sampling)
        for name in REFUSED_SAMPLING:
            compat.refuse(name, options.pop(name, REFUSED_SAMPLING[name][0]), REFUSED_SAMPLING)
        options.pop("tfs_z", None)  # tail-free sampling left llama.cpp; llama-cpp-python ignores it too
        # llama-cpp-python's rule: every completion sets the seed it draws with, its own
        # or the next in the sequence (greedy ones too, which draw nothing)
        self._seed = compat.next_seed(self._seed) if seed is None else seed
        options["seed"] = compat.draw_seed(self._seed)
        if options.get("top_k") is not None and options["top_k"] <= 0:
            options["top_k"] = 0  # llama.cpp: top-k off
        if options.get("temperature", 0) < 0:  # llama.cpp's dist sampler alone: the raw distribution
            options.update(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0)
        # llama-cpp-python penalizes the generated tokens only, its last last_n_tokens_size
        options["penalize_prompt"] = False
        options["repeat_last_n"] = self.last_n_tokens_size
        if options.get("stop") is None:
            options["stop"] = ()
        return options

    def create_completion(
        self,
        prompt: Union[str, list[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Union[str, list[str], None] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_completion. `echo` puts the prompt before the text;
        `suffix` is appended after it (llama-cpp-python's rule for a model without
        infill tokens). logits_processor / stopping_criteria run on each step's
        logits (the call then decodes plainly; usage.river.plain_decoding says so).
        River options (policy, speculative, cancel) and `n` pass through;
        mirostat_* are refused unless neutral; tfs_z is ignored, as llama-cpp-python
        ignores it."""
        if echo and logprobs is not None:
            raise ValueError("river_cpp.Llama cannot serve echo with logprobs: the prompt's logprobs are not computed")
        if suffix is not None and not isinstance(suffix, str):
            raise ValueError(f"suffix must be a string, got {type(suffix).__name__}")
        sampling = dict(
            temperature=temperature,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            stop=stop,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty,
            top_k=top_k,
            logit_bias=logit_bias,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )
        result = create_completion(
            self._model,
            prompt,
            max_tokens=max_tokens,
            logprobs=logprobs,
            stream=stream,
            model_name=model,
            grammar=grammar,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
            **options,
            **self._sampling(seed, sampling),
        )
        echoed = prompt if isinstance(prompt, str) else self.detokenize(prompt).decode("utf-8", errors="ignore")
        if stream:
            return _framed_chunks(result, echoed if echo else "", suffix or "")
        for choice in result["choices"]:
            choice["text"] = (echoed if echo else "") + choice["text"] + (suffix or "")
        return result

    def __call__(self, prompt: Union[str, list[int]], *args: Any, **kwargs: Any):
        """create_completion."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(
        self,
        messages: Sequence[Mapping[str, Any]],
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        function_call: Any = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Union[str, list[str], None] = None,
        seed: Optional[int] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Mapping[Any, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        **options: Any,
    ) -> Union[dict[str, Any], Iterator[dict[str, Any]]]:
        """llama-cpp-python's create_chat_completion, on the GGUF's own chat template
        (Jinja2, as llama-cpp-python renders it) or the chat_format's. tools /
        tool_choice (and the older functions / function_call) give OpenAI tool_calls
        on any template: in the template's own call syntax where it has one, else a
        named or "required" choice makes the reply the call's JSON; response_format
        and grammar constrain the reply (river_cpp.completions.create_chat_completion)."""
        tools, tool_choice = _as_tools(functions, function_call, tools, tool_choice)
        sampling = dict(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            typical_p=typical_p,
            stop=stop,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty,
            logit_bias=logit_bias,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )
        return create_chat_completion(
            self._model,
            messages,
            max_tokens=max_tokens,
            stream=stream,
            logprobs=bool(logprobs),
            top_logprobs=top_logprobs if logprobs else None,
            model_name=model,
            grammar=grammar,
            response_format=response_format,
            tools=tools,
            tool_choice=tool_choice,
            template_engine="jinja",
            chat_template_source=self._template_source,
            logits_processor=logits_processor,
            **options,
            **self._sampling(seed, sampling),
        )

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """create_chat_completion's answer as the openai package's ChatCompletion (or
        an iterator of ChatCompletionChunk with stream=True); needs `openai`."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from None
        out = self.create_chat_completion(*args, **kwargs)
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**chunk) for chunk in out)
        return ChatCompletion(**out)


def _framed_chunks(chunks: Iterator[dict[str, Any]], before: str, after: str) -> Iterator[dict[str, Any]]:
    """A completion stream with `before` in each choice's first text chunk and
    `after` in its last."""
    started: set[int] = set()
    try:
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                if choice["index"] not in started:
                    choice["text"] = before + choice["text"]
                    started.add(choice["index"])
                if choice.get("finish_reason") is not None:
                    choice["text"] += after
            yield chunk
    finally:
        chunks.close()


def _as_tools(functions: Any, function_call: Any, tools: Any, tool_choice: Any) -> tuple[Any, Any]:
    """A chat's (tools, tool_choice), with OpenAI's older functions / function_call in
    their place where those are given and the newer are not; an empty tools list is no
    tools, as llama-cpp-python reads it (Haystack sends one)."""
    if not tools:
        tools = None
    if functions is not None and tools is None:
        tools = [{"type": "function", "function": f} for f in functions]
    if function_call is not None and tool_choice is None:
        tool_choice = (
            function_call
            if isinstance(function_call, str)
            else {"type": "function", "function": {"name": function_call.get("name")}}
        )
    return tools, tool_choice
