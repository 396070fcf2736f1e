"""How `river-cpp serve` listens and whom it serves: ServerConfig and its checks.

Apart from the app so that `river-cpp serve` can refuse a configuration before it
loads a model, and so that tests can check one without starlette.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from river_cpp._net import is_loopback

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_QUEUE_SIZE = 8
# Requests run at once (docs/server.md, "Slots": how it was chosen).
DEFAULT_PARALLEL = 4


@dataclass
class ServerConfig:
    """How `river-cpp serve` listens and whom it serves.

    parallel: requests run at once, each on a sequence of its own (the model is loaded
        with n_seq_max = parallel), their forwards batched together.
    queue_size: requests that may wait while `parallel` run (more get 503 + Retry-After).
    allowed_hosts: Host header names accepted besides loopback and the bind address
        ("*": any). cors_origins: browser origins allowed (None: localhost pages only).
    api_key: required as "Authorization: Bearer KEY" on every route but /health.
    insecure: allow binding a non-loopback address without an API key.
    How a request decodes when its `river` field does not say is the served model's
    default (RiverModel's policy and speculative, as `river-cpp serve` resolved them).
    share_drafts: requests draft from the model's memory of earlier requests (and add
        theirs to it); off, no request's text reaches another's drafts (or timing).
    share_prompt_cache: a prompt cached by one client's request serves every client's
        (a shared prefix is then faster for all; output never changes); off, a cached
        prefix serves only requests that present the same API key.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: Optional[str] = None
    parallel: int = DEFAULT_PARALLEL
    queue_size: int = DEFAULT_QUEUE_SIZE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    allowed_hosts: Sequence[str] = ()
    cors_origins: Optional[Sequence[str]] = None
    insecure: bool = False
    keepalive_seconds: float = 10.0
    share_drafts: bool = False
    share_prompt_cache: bool = False

    def check(self) -> None:
        """ValueError for a configuration that must not run."""
        if not is_loopback(self.host) and not self.api_key and not self.insecure:
            raise ValueError(
                f"refusing to serve on {self.host} (not loopback) without --api-key; pass --insecure to do it anyway"
            )
        if isinstance(self.parallel, bool) or not isinstance(self.parallel, int) or self.parallel < 1:
            raise ValueError(f"--parallel must be a positive integer, got {self.parallel!r}")
        if self.queue_size < 0:
            raise ValueError(f"the queue size must be >= 0, got {self.queue_size}")
        if self.max_body_bytes <= 0:
            raise ValueError(f"the body size cap must be positive, got {self.max_body_bytes}")

    def host_names(self) -> set[str]:
        """The Host header names accepted: loopback, the bind address, --allowed-host."""
        names = {*LOOPBACK_HOSTS, *(h.lower().strip("[]") for h in self.allowed_hosts)}
        if self.host not in ("0.0.0.0", "::", ""):
            names.add(self.host.lower().strip("[]"))
        return names
