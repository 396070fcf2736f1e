"""This process's RPC servers (`river-cpp rpc-server`), around ggml's RPC client.

ggml's client aborts the process when a server it is asked to reach does not answer,
and a command on a connection whose server went away aborts it too (or hangs in
the abort's backtrace). So river-cpp talks to a server through ggml only while it
knows the server is there:

- `connect_rpc_servers` checks that each server answers before ggml connects to it;
- while a live model has weights on a server, a *link* (one kept-alive socket per
  server, shared by the models on it) tells in a non-blocking peek whether the
  server is still there; `RiverModel` checks it before every forward and at close;
- a server found gone stays gone for this process: its models leak what lives there
  instead of freeing it (see `Engine.lose_device`), which keeps ggml's connection to
  it open and dead, so ggml must never be asked to reach that server again.

A link is a connection the server never accepts (it serves one client at a time,
and serves this process's ggml connection while a model is placed there), so it
costs the server nothing; when the server process ends, the kernel resets it, and
TCP keep-alive probes notice a machine that vanished without a word.
"""

from __future__ import annotations

import socket
import threading
from typing import Iterable, Sequence

from river_cpp.engine import _core

# TCP keep-alive on a link: a server whose machine stops answering is seen as gone
# after about IDLE + INTERVAL * COUNT seconds without traffic from it.
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3

_lock = threading.Lock()
_links: dict[str, _Link] = {}
_gone: set[str] = set()


class _Link:
    """A kept-alive connection to one server and the number of models holding it."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        host, port = _parse(endpoint)
        self.endpoint = endpoint
        self.holders = 0
        self.socket = socket.create_connection((host, port), timeout=timeout)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (
            ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
            ("TCP_KEEPALIVE", KEEPALIVE_IDLE_S),  # macOS's name for the idle time
            ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
            ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ):
            if hasattr(socket, option):
                self.socket.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        self.socket.setblocking(False)

    def alive(self) -> bool:
        """False once the server closed or reset the connection, or keep-alive gave up."""
        try:
            data = self.socket.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True  # nothing to read and no error: the connection stands
        except OSError:
            return False  # reset (the server process ended) or timed out (its machine went)
        return data != b""  # b"": the server closed it


def _parse(endpoint: str) -> tuple[str, int]:
    host, _, port = str(endpoint).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an RPC server is 'host:port', got {endpoint!r}")
    return host.strip("[]"), int(port)


def connect_rpc_servers(endpoints: Sequence[str], timeout: float = 5.0) -> None:
    """Add the devices of RPC servers ("host:port") to this process, after checking
    that ggml has RPC and that each server answers (ggml's RPC client would abort the
    process on a failed connection). Raises ConnectionError for a server that does
    not answer, or that went away earlier in this process."""
    if isinstance(endpoints, str):
        raise TypeError("rpc_servers is a list of 'host:port' strings, not one string")
    parsed = [(str(endpoint), *_parse(endpoint)) for endpoint in endpoints]
    with _lock:
        gone = [endpoint for endpoint, _, _ in parsed if endpoint in _gone]
    if gone:
        raise ConnectionError(
            f"the RPC server at {gone[0]} went away earlier in this process; ggml keeps its dead "
            "connection to it, so only a new process can use a server there again"
        )
    if parsed and not _core.has_rpc():
        _core.add_rpc_server(parsed[0][0])  # raises the error that names the CMAKE_ARGS
    for endpoint, host, port in parsed:
        with _lock:
            linked = endpoint in _links
        if not linked:
            # A held link already says the server is there; a probe would only queue
            # behind this process's connections (the server's backlog is one).
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    pass
            except OSError as e:
                raise ConnectionError(
                    f"cannot reach the RPC server at {endpoint} ({e}); start one there with "
                    "`river-cpp rpc-server --port PORT`"
                ) from e
        _core.add_rpc_server(endpoint)


def hold_links(endpoints: Iterable[str], timeout: float = 5.0) -> None:
    """Hold a link to each server, for a model just placed there (after ggml's own
    connection is up: a link opened first would be the one the server serves). A
    server that does not answer is marked gone; `gone_servers` then names it."""
    with _lock:
        for endpoint in endpoints:
            link = _links.get(endpoint)
            if link is None and endpoint not in _gone:
                try:
                    link = _links[endpoint] = _Link(endpoint, timeout)
                except OSError:
                    _gone.add(endpoint)
            if link is not None:
                link.holders += 1


def release_links(endpoints: Iterable[str]) -> None:
    """Let go of links `hold_links` gave; the last holder's release closes one."""
    with _lock:
        for endpoint in endpoints:
            link = _links.get(endpoint)
            if link is None:
                continue
            link.holders -= 1
            if link.holders == 0:
                link.socket.close()
                del _links[endpoint]


def gone_servers(endpoints: Iterable[str]) -> list[str]:
    """Those of `endpoints` whose server went away (checked now on their links; a
    server once gone stays gone for this process)."""
    gone = []
    with _lock:
        for endpoint in endpoints:
            link = _links.get(endpoint)
            if endpoint not in _gone and link is not None and not link.alive():
                _gone.add(endpoint)
            if endpoint in _gone:
                gone.append(endpoint)
    return gone
