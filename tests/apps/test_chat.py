"""river_cpp.apps.chat and `river-cpp chat`: the conversation, its prompt cache, the REPL
driven through a pipe; river_cpp.apps.exit_display and `generate --show-exits`."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from river_cpp import RiverModel, SamplingParams
from river_cpp.apps.chat import ChatSession, footer, repl
from river_cpp.apps.cli import main
from river_cpp.apps.exit_display import ExitPainter

CLI = [sys.executable, "-c", "import sys; from river_cpp.apps.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def model(tiny_llama4: Path) -> RiverModel:
    with RiverModel(tiny_llama4, n_ctx=256, n_threads=2, river=None) as model:
        yield model


def test_a_second_turn_reuses_the_first_turns_prompt(model):
    session = ChatSession(model, system="Be brief.", max_tokens=6, sampling=SamplingParams(temperature=0.0))
    written: list[str] = []
    first = session.ask("Hello there", written.append)
    assert "".join(written) == first.text and first.cached_tokens == 0
    second = session.ask("And then?", written.append)
    assert second.cached_tokens >= first.prompt_tokens - 1
    assert [m["role"] for m in session.messages()] == ["system", "user", "assistant", "user", "assistant"]
    line = footer(second, model.n_layer)
    assert "tokens/s" in line and "mean exit layer" in line and "cached" in line
    assert "turns: 2" in session.stats()


def test_stats_gives_the_footers_speed_estimate(demo_backbone):
    # n-gram drafts alone, on the story generate's footer test tells: some rounds draft
    # and most decode plain, so there is an estimate to show
    with RiverModel(demo_backbone, n_ctx=1024, n_threads=2, river=None) as demo:
        session = ChatSession(demo, max_tokens=96, sampling=SamplingParams(temperature=0.0))
        turn = session.ask("Tell me a story about a river.", lambda text: None)
        speedup = turn.result.speculative.round_times.speedup()
        assert speedup is not None
        assert f"about {speedup:.2f}x plain decoding" in footer(turn, demo.n_layer)
        assert f"speed: about {speedup:.2f}x plain decoding (an estimate" in session.stats()


@pytest.mark.slow
def test_old_exchanges_are_dropped_to_fit_the_context(model):
    session = ChatSession(model, max_tokens=8, sampling=SamplingParams(temperature=0.0))
    for _ in range(12):
        turn = session.ask("Tell me a long story about rivers and the sea and the mountains. " * 2, lambda s: None)
    assert turn.dropped_turns >= 1 and turn.prompt_tokens + 8 <= model.n_ctx


@pytest.mark.slow
def test_the_repl_through_a_pipe(tiny_llama4, tmp_path):
    script = (
        "\n".join(
            [
                "Hello there",
                "/stats",
                '"""',
                "first line",
                "second line",
                '"""',
                "/system Be brief.",
                "/tau 0.5",
                "/tau off",
                "/nonsense",
                "/reset",
                "Again",
                "/exit",
                "never read",
            ]
        )
        + "\n"
    )
    done = subprocess.run(
        CLI
        + [
            "chat",
            "-m",
            str(tiny_llama4),
            "--river",
            "none",
            "-t",
            "2",
            "--n-ctx",
            "256",
            "-n",
            "6",
            "--temperature",
            "0",
        ],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    footers = [line for line in done.stderr.splitlines() if line.startswith("[") and "tokens/s" in line]
    assert len(footers) == 3  # three messages, the multi-line one counted once
    assert "turns: 1" in done.stderr and "[system prompt set]" in done.stderr
    assert "error: /tau" in done.stderr  # no river: only the backbone
    assert "unknown command /nonsense" in done.stderr and "[conversation forgotten]" in done.stderr
    assert len(done.stdout.splitlines()) == 3


def test_exit_painter_buckets_and_markers():
    painter = ExitPainter(30, color=False)
    assert painter.buckets[0] == (0, 0) and painter.buckets[-1] == (30, 30)
    assert [painter.bucket(d) for d in (0, 1, 30)] == [0, 1, len(painter.buckets) - 1]
    covered = [d for low, high in painter.buckets for d in range(low, high + 1)]
    assert covered == list(range(31))
    assert painter.paint(" Paris", 12) == " Paris{12}" and painter.paint("", 3) == ""
    colored = ExitPainter(4, color=True)
    assert colored.paint("x", 0).startswith("\x1b[38;5;") and "backbone" in colored.legend()


def test_generate_show_exits_marks_tokens(tiny_llama4, capsys, river_cache):
    assert (
        main(["generate", "Hello", "-m", str(tiny_llama4), "-n", "6", "--exit-layer", "2", "--show-exits", "-t", "2"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("[exit depth") and "{2}" in out


class _InterruptingOutput(io.StringIO):
    """Stdout where the user presses Ctrl+C after a few pieces of every answer."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after
        self.pieces = 0

    def write(self, text: str) -> int:
        if text and text != "\n":
            self.pieces += 1
            if self.pieces % self.after == 0:
                raise KeyboardInterrupt
        return super().write(text)


def test_ctrl_c_stops_the_answer_and_twice_quits(model, monkeypatch):
    monkeypatch.setattr("river_cpp.apps.chat.DOUBLE_INTERRUPT_SECONDS", 60.0)  # a loaded machine is slow
    session = ChatSession(model, max_tokens=40, sampling=SamplingParams(temperature=0.0))
    stderr = io.StringIO()
    status = repl(
        session,
        stdin=io.StringIO("Tell me a story\nAnother one\nnever asked\n"),
        stdout=_InterruptingOutput(after=3),
        stderr=stderr,
    )
    assert status == 130  # the second Ctrl+C came within DOUBLE_INTERRUPT_SECONDS
    assert "[stopped]" in stderr.getvalue() and len(session.turns) == 2
    assert session.turns[0].result is None and len(session.turns[0].exit_layers) == 3
    assert session.history[1]["content"] == session.turns[0].text  # the partial answer stays
    assert model.scheduler.in_use == 0  # every sequence given back
    assert model.create_completion("Hi", max_tokens=2)["choices"]  # the model serves the next call
