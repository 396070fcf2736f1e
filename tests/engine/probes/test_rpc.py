"""RPC servers as this process sees them: endpoints checked before ggml connects, and
links that tell whether a server holding part of a model is still there. Plain
sockets stand in for servers here; tests/engine/test_devices.py kills real ones."""

from __future__ import annotations

import socket

import pytest

from river_cpp.engine import _core
from river_cpp.engine.probes import rpc
from river_cpp.engine.probes.rpc import connect_rpc_servers, gone_servers, hold_links, release_links

pytestmark = pytest.mark.rpc


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Links and gone servers of these tests only: a port marked gone here must not
    refuse a server that a later test starts on the same port."""
    monkeypatch.setattr(rpc, "_links", {})
    monkeypatch.setattr(rpc, "_gone", set())


@pytest.fixture
def listener():
    """A listening socket that never accepts, as a server busy with this process's
    ggml connection leaves a link waiting; closing it is the server process ending."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield s, f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("endpoint", ["localhost", "localhost:", ":50052", "host:port", "host:70000"])
def test_rpc_endpoint_must_be_host_and_port(endpoint):
    with pytest.raises(ValueError, match="host:port"):
        connect_rpc_servers([endpoint])


def test_rpc_servers_is_a_list():
    with pytest.raises(TypeError, match="list"):
        connect_rpc_servers("127.0.0.1:50052")


def test_an_unreachable_rpc_server_is_a_clear_error():
    if not _core.has_rpc():
        pytest.skip("this ggml has no RPC backend: the error names the CMAKE_ARGS instead")
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ConnectionError, match=f"cannot reach the RPC server at 127.0.0.1:{port}"):
            connect_rpc_servers([f"127.0.0.1:{port}"], timeout=2)


def test_a_link_sees_its_server_end_and_the_server_stays_gone(listener):
    server, endpoint = listener
    hold_links([endpoint])
    try:
        assert gone_servers([endpoint]) == []
        assert gone_servers([endpoint]) == []  # a check reads nothing off the link
        server.close()
        assert gone_servers([endpoint]) == [endpoint]
        with pytest.raises(ConnectionError, match=f"{endpoint} went away earlier in this process"):
            connect_rpc_servers(["127.0.0.1:1", endpoint])
    finally:
        release_links([endpoint])
    assert gone_servers([endpoint]) == [endpoint]  # for good, though no model holds it now


def test_a_link_sees_its_server_close_it(listener):
    server, endpoint = listener
    hold_links([endpoint])
    try:
        accepted, _ = server.accept()
        assert gone_servers([endpoint]) == []
        accepted.close()
        assert gone_servers([endpoint]) == [endpoint]
    finally:
        release_links([endpoint])


def test_the_last_holder_closes_a_link(listener):
    server, endpoint = listener
    hold_links([endpoint])
    hold_links([endpoint])
    release_links([endpoint])
    accepted, _ = server.accept()  # the one link both models held
    with accepted:
        accepted.settimeout(5)
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()
        release_links([endpoint])
        assert accepted.recv(1) == b""  # closed by the second release
    # no link: nothing is checked, so the server's end goes unseen
    server.close()
    assert gone_servers([endpoint]) == []


def test_a_server_that_does_not_answer_when_a_model_holds_it_is_gone():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
        hold_links([endpoint], timeout=2)
    release_links([endpoint])
    assert gone_servers([endpoint]) == [endpoint]
