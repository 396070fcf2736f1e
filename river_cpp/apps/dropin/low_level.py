"""Llama's low-level calls, as llama-cpp-python has them: the cached sequence
(n_tokens, input_ids, reset, save_state / load_state), eval() that appends tokens and
keeps their logits (scores), sample() that draws a token from them, and generate()
that loops the two.

A base class of river_cpp.apps.dropin.llama.Llama, reading the model, seed and logits that
Llama holds. Plain decoding by the backbone, no drafts; the completions are
river_cpp.apps.dropin.completions'.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from river_cpp.apps.dropin import compat
from river_cpp.apps.dropin.compat import REFUSED_SAMPLING
from river_cpp.apps.dropin.members import LlamaState
from river_cpp.decoding.sampling import Sampler, SamplingParams
from river_cpp.engine.compute.backbone import common_prefix
from river_cpp.model import RiverModel


class LowLevelCalls:
    """eval / sample / generate and the cached sequence, on a Llama's model."""

    # what river_cpp.apps.dropin.llama.Llama gives these calls
    _river: Optional[RiverModel]
    _model: RiverModel
    _seed: Optional[int]
    _logits: Optional[np.ndarray]  # the last eval()'s logits
    _logits_at: int  # n_tokens when they were computed
    _logits_all: bool
    last_n_tokens_size: int  # and its n_ctx(), n_vocab()

    @property
    def n_tokens(self) -> int:
        """Positions in the KV cache."""
        return self._model.n_past if self._river is not None else 0

    @property
    def input_ids(self) -> np.ndarray:
        """The token ids in the KV cache (np.intc)."""
        if self._river is None:
            return np.zeros(0, dtype=np.intc)
        return np.array(self._river.cached_ids, dtype=np.intc)

    _input_ids = input_ids

    @property
    def scores(self) -> np.ndarray:
        """The logits of the last eval() ([positions, n_vocab]: all of its positions
        with logits_all=True, else the last)."""
        if self._logits is None:
            return np.zeros((0, self.n_vocab()), dtype=np.float32)
        return self._logits

    _scores = scores

    def reset(self) -> None:
        """Forget the cached sequence."""
        self._model.reset()
        self._logits, self._logits_at = None, -1

    def set_seed(self, seed: int) -> None:
        """The seed eval/sample/generate draw with, and the one the next completion
        without a seed takes its own from (see __init__)."""
        self._seed = seed

    def save_state(self) -> LlamaState:
        """The cached token sequence and the seed."""
        ids = self.input_ids
        return LlamaState(input_ids=ids, n_tokens=int(ids.size), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Bring the cache to `state`'s tokens (recomputed by the backbone) and its seed."""
        ids = [int(t) for t in np.asarray(state.input_ids)[: state.n_tokens]]
        self.reset()
        if ids:
            self._model.forward(ids, last_only=True, route="backbone")
        self.set_seed(state.seed)

    def eval(self, tokens: Sequence[int]) -> None:
        """Append `tokens` to the cached sequence and compute their logits (the
        backbone's; `scores` holds them)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        # Several tokens at once are a prompt (llama-cpp-python's generate evaluates the
        # prompt, then one token at a time): ggml's fastest kernels, as steps.prefill
        # takes; one token is a plain step, with the arithmetic verify rows match.
        logits = self._model.forward(tokens, last_only=not self._logits_all, route="backbone", prompt=len(tokens) > 1)
        self._logits, self._logits_at = np.asarray(logits, dtype=np.float32), self.n_tokens

    def sample(
        self,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_eta: float = 0.1,
        mirostat_tau: float = 5.0,
        penalize_nl: bool = True,
        logits_processor: Any = None,
        grammar: Any = None,
        idx: Optional[int] = None,
    ) -> int:
        """A token from the last eval()'s logits (position `idx` of the sequence with
        logits_all=True), as llama-cpp-python samples: logits processors first, then
        penalties (none here: a lone sample has no history), the grammar, top-k,
        typical, top-p, min-p and temperature (0: greedy; < 0: the raw distribution)."""
        for name, value in (("mirostat_mode", mirostat_mode), ("mirostat_tau", mirostat_tau)):
            compat.refuse(name, value, REFUSED_SAMPLING)
        compat.refuse("mirostat_eta", mirostat_eta, REFUSED_SAMPLING)
        sampler = Sampler(
            self._sample_params(
                top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty, presence_penalty
            )
        )
        state = self._grammar(grammar).start() if grammar is not None else None
        return self._sample_with(sampler, [], logits_processor, state, idx)

    def _sample_params(
        self,
        top_k: int,
        top_p: float,
        min_p: float,
        typical_p: float,
        temp: float,
        repeat_penalty: float,
        frequency_penalty: float,
        presence_penalty: float,
    ) -> SamplingParams:
        if temp < 0:  # llama.cpp's dist sampler alone: the unmodified distribution
            temp, top_k, top_p, min_p, typical_p = 1.0, 0, 1.0, 0.0, 1.0
        return SamplingParams(
            temperature=temp,
            top_k=max(int(top_k), 0),
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            repeat_last_n=self.last_n_tokens_size,
            seed=compat.draw_seed(self._seed),
        )

    def _grammar(self, grammar: Any):
        from river_cpp.completions.structured import request_grammar

        return request_grammar(self._model, grammar=grammar)

    def _sample_with(
        self, sampler: Sampler, generated: Sequence[int], processors: Any, state: Any, idx: Optional[int]
    ) -> int:
        if self._logits is None or self._logits_at != self.n_tokens:
            raise RuntimeError("sample() needs the logits of an eval() of the current sequence: call eval() first")
        row = -1 if idx is None or not self._logits_all else idx - (self.n_tokens - self._logits.shape[0])
        logits = np.array(self._logits[row], dtype=np.float32)
        if processors is not None:
            ids = self.input_ids
            for processor in processors if isinstance(processors, (list, tuple)) else [processors]:
                out = processor(ids, logits)
                logits = logits if out is None else np.asarray(out, dtype=np.float32)
        token = sampler(logits, list(generated), state)
        if state is not None:
            state.accept(token)
        return token

    def generate(
        self,
        tokens: Sequence[int],
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        reset: bool = True,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        penalize_nl: bool = True,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        grammar: Any = None,
    ) -> Iterator[int]:
        """Tokens continuing `tokens`, one per next(), until the caller stops (or the
        context is full), as llama-cpp-python's generate: with `reset`, the longest
        prefix of `tokens` already cached is reused; `send(ids)` adds ids after the
        token just yielded; a stopping criterion that fires ends it before that
        token. Plain decoding by the backbone (no drafts)."""
        for name, value in (("mirostat_mode", mirostat_mode), ("mirostat_tau", mirostat_tau)):
            compat.refuse(name, value, REFUSED_SAMPLING)
        compat.refuse("mirostat_eta", mirostat_eta, REFUSED_SAMPLING)
        params = self._sample_params(
            top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty, presence_penalty
        )
        return self._generate(list(tokens), params, reset, logits_processor, stopping_criteria, grammar)

    def _generate(
        self, tokens: list[int], params: SamplingParams, reset: bool, processors: Any, stopping: Any, grammar: Any
    ) -> Iterator[int]:
        sampler = Sampler(params)
        state = self._grammar(grammar).start() if grammar is not None else None
        cached = [int(t) for t in self.input_ids]
        if reset:
            keep = min(
                common_prefix(cached, tokens), len(tokens) - 1
            )  # at least one token is evaluated, for its logits
            if keep < len(cached):
                self._model.rewind(max(keep, 0))
            tokens = tokens[max(keep, 0) :]
        generated: list[int] = []
        while True:
            if self.n_tokens + len(tokens) > self.n_ctx():
                return
            self.eval(tokens)
            token = self._sample_with(sampler, generated, processors, state, None)
            if stopping is not None:
                criteria = stopping if isinstance(stopping, (list, tuple)) else [stopping]
                if any(bool(stop(self.input_ids, self._logits[-1])) for stop in criteria):
                    return
            generated.append(token)
            sent = yield token
            tokens = [token, *(sent or ())]
