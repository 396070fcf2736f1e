"""river_cpp.apps.server.config: what `river-cpp serve` refuses before loading anything."""

from __future__ import annotations

import pytest

from river_cpp.apps.server.config import ServerConfig

pytestmark = pytest.mark.server


def test_non_loopback_bind_needs_an_api_key():
    with pytest.raises(ValueError, match="api-key"):
        ServerConfig(host="0.0.0.0").check()
    ServerConfig(host="0.0.0.0", api_key="k").check()
    ServerConfig(host="0.0.0.0", insecure=True).check()
    ServerConfig(host="::1").check()
    ServerConfig(host="localhost").check()


@pytest.mark.parametrize("limits", [{"queue_size": -1}, {"max_body_bytes": 0}])
def test_limits_must_make_sense(limits):
    with pytest.raises(ValueError):
        ServerConfig(**limits).check()


def test_host_names_are_loopback_the_bind_address_and_the_allowed():
    assert ServerConfig().host_names() >= {"localhost", "127.0.0.1", "::1"}
    names = ServerConfig(host="192.0.2.7", api_key="k", allowed_hosts=["Example.ORG", "[2001:db8::1]"]).host_names()
    assert {"192.0.2.7", "example.org", "2001:db8::1"} <= names
    assert "0.0.0.0" not in ServerConfig(host="0.0.0.0", insecure=True).host_names()  # not a name a client sends
