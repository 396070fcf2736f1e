"""The one check that tokens fit the context, and the error it raises."""

from __future__ import annotations


class ContextOverflowError(ValueError):
    """`prompt_tokens` new tokens (after `cached` already in the cache) do not fit a
    context of `n_ctx` with the room they need."""

    def __init__(self, prompt_tokens: int, n_ctx: int, cached: int = 0) -> None:
        held = f"{cached} cached + {prompt_tokens} new tokens" if cached else f"the prompt's {prompt_tokens} tokens"
        super().__init__(f"context overflow: {held} leave no room to generate in n_ctx = {n_ctx}")
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.n_ctx = n_ctx


def check_fits(n_tokens: int, n_ctx: int, *, cached: int = 0, room: int = 1) -> None:
    """ContextOverflowError unless `cached` + `n_tokens` positions leave `room` more in
    n_ctx (generating needs one: the first sampled token's position; a forward none)."""
    if cached + n_tokens + room > n_ctx:
        raise ContextOverflowError(n_tokens, n_ctx, cached)
