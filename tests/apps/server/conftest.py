"""Fixtures of the server's tests."""

from __future__ import annotations

import pytest

from river_cpp.apps.server import worker


def _stand_in_answer(model, prompt, **options):
    return model.create_completion(prompt, **options)


@pytest.fixture
def stand_in_completions(monkeypatch):
    """The worker calls the completions code on its model; with this, a stand-in model
    (no engine) answers through its own create_completion instead."""
    monkeypatch.setattr(worker, "create_completion", _stand_in_answer)
    monkeypatch.setattr(worker, "create_chat_completion", _stand_in_answer)
