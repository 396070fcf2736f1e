"""The interactive chat (`river-cpp chat`): a conversation in the model's chat template.

Owns the conversation (history, system prompt, fitting it in the context), the
REPL's commands and its per-turn footer. Each turn is one generation by
river_cpp.decoding.generation; the prompt cache makes a turn re-run only what is new.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, TextIO

from river_cpp.decoding.decision import Decoding
from river_cpp.decoding.draft_guard import RoundTimes
from river_cpp.decoding.exit_stats import ExitStats
from river_cpp.decoding.generation import GenerationResult
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative_stats import SpeculativeStats
from river_cpp.engine.compute.policy import ExitPolicy

HELP = """commands:
  /reset          forget the conversation (the system prompt stays)
  /stats          exit depths and speeds of this conversation
  /tau X          lossy: exit when the block similarity exceeds X (/tau off: as started)
  /system TEXT    set the system prompt (/system alone removes it)
  /exit           quit (also Ctrl+D; Ctrl+C stops an answer, twice quits)
  \"\"\"             begin and end a multi-line message"""
MULTILINE = '"""'
# Two Ctrl+C within this many seconds quit.
DOUBLE_INTERRUPT_SECONDS = 2.0


@dataclass
class Turn:
    """One answer: its text, the generation's result (None when stopped), and stats."""

    text: str
    result: Optional[GenerationResult]
    prompt_tokens: int
    cached_tokens: int
    exit_layers: list[int]
    seconds: float
    dropped_turns: int = 0


@dataclass
class ChatSession:
    """A conversation with a model: history, system prompt, sampling settings and the
    decode of its turns (policy and speculative: None, the model's defaults; /tau sets
    the policy), resolved for each turn by the model (river_cpp.decoding.decision)."""

    model: Any
    system: Optional[str] = None
    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    speculative: Any = None
    policy: Optional[ExitPolicy] = None
    history: list[dict[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    def messages(self, user: Optional[str] = None) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        new = [{"role": "user", "content": user}] if user is not None else []
        return system + self.history + new

    def reset(self) -> None:
        self.history.clear()

    def _prompt_ids(self, user: str) -> tuple[list[int], int]:
        """The turn's prompt tokens, dropping the oldest exchanges until the prompt leaves
        room for an answer; (ids, exchanges dropped). ValueError if the message alone does not fit."""
        model = self.model
        dropped = 0
        room = min(self.max_tokens, max(16, model.n_ctx // 4))
        while True:
            text = model.tokenizer.apply_chat_template(self.messages(user))
            ids = model.tokenize(text, add_bos=True, special=True)
            if len(ids) + room <= model.n_ctx or len(ids) < model.n_ctx and not self.history:
                return ids, dropped
            if not self.history:
                raise ValueError(
                    f"the message has {len(ids)} tokens with its template; the context holds {model.n_ctx}"
                )
            del self.history[:2]
            dropped += 1

    def decoding(self) -> Decoding:
        """How the next turn decodes: the session's options over the model's defaults."""
        return self.model.decoding("repl", policy=self.policy, speculative=self.speculative, sampling=self.sampling)

    def ask(self, user: str, write: Callable[[str], None]) -> Turn:
        """Answer `user`, writing the text as it comes. A KeyboardInterrupt stops the
        answer; what was written stays in the history, and the interrupt propagates
        with the Turn as its `turn` attribute."""
        ids, dropped = self._prompt_ids(user)
        decoding = self.decoding()
        stream = self.model.generate(ids, stream=True, max_tokens=self.max_tokens, decoding=decoding)
        text: list[str] = []
        layers: list[int] = []
        cached = 0
        start = time.perf_counter()
        result = None
        try:
            for chunk in stream:
                text.append(chunk.text)
                layers.append(chunk.exit_layer)
                cached += chunk.cached_tokens
                write(chunk.text)
            result = stream.result
        finally:
            stream.close()
            turn = Turn("".join(text), result, len(ids), cached, layers, time.perf_counter() - start, dropped)
            self.history += [{"role": "user", "content": user}, {"role": "assistant", "content": turn.text}]
            self.turns.append(turn)
        return turn

    def describe_decode(self) -> str:
        """How the next turn decodes: exact (drafted or not) or the lossy policy."""
        decoding = self.decoding()
        if decoding.drafts:
            return "the backbone's own tokens, drafted (lossless)"
        if not decoding.policy.exits(self.model.n_layer):
            return "the backbone's own tokens"
        return describe_policy(decoding.policy)

    def stats(self) -> str:
        """What /stats prints: the conversation's exit depths and speeds."""
        layers = [d for t in self.turns for d in t.exit_layers]
        stats = ExitStats.from_exit_layers(layers, self.model.n_layer)
        done = [t.result for t in self.turns if t.result is not None]
        generated = sum(len(r.token_ids) - 1 for r in done)
        seconds = sum(r.generation_seconds for r in done)
        lines = [
            f"turns: {len(self.turns)}, tokens generated: {len(layers)}, "
            f"context: {self.model.n_past}/{self.model.n_ctx} positions cached",
            stats.summary(),
            f"generation: {generated / seconds if seconds > 0 else 0.0:.1f} tokens/s over the conversation",
            f"decode: {self.describe_decode()}",
        ]
        drafted = [r.speculative for r in done if r.speculative is not None]
        if drafted:  # the footer's estimate, over every drafted turn's rounds
            rounds = SpeculativeStats(round_times=sum((s.round_times for s in drafted), RoundTimes()))
            lines.append(rounds.speed_summary() or "speed: no round drafted, so no estimate against plain decoding")
        if stats.n_tokens:
            lines.append(
                "exit depth histogram: "
                + " ".join(f"{depth}:{count}" for depth, count in enumerate(stats.histogram) if count)
            )
        return "\n".join(lines)


def describe_policy(policy: ExitPolicy) -> str:
    thresholds = set(policy.thresholds) | {policy.beyond}
    if thresholds == {float("inf")}:
        return "backbone only"
    if (
        policy.thresholds
        and policy.thresholds[-1] == float("-inf")
        and policy.beyond == float("inf")
        and set(policy.thresholds[:-1]) <= {float("inf")}
    ):
        return f"exit after {len(policy.thresholds) - 1} backbone layers"
    finite = sorted(t for t in thresholds if abs(t) != float("inf"))
    if len(finite) == 1:
        return f"tau {finite[0]:g} ({policy.signal})"
    return f"per-layer thresholds ({policy.signal})"


def footer(turn: Turn, n_layer: int) -> str:
    """The line after each answer: tokens, prompt and generation speeds, mean exit layer."""
    stats = ExitStats.from_exit_layers(turn.exit_layers, n_layer)
    r = turn.result
    prompt = f"prompt {turn.prompt_tokens} tokens ({turn.cached_tokens} cached)"
    if r is not None:
        prompt += f" {r.prompt_tokens_per_second:.1f} tokens/s"
        speed = f"{r.generation_tokens_per_second:.1f} tokens/s"
    else:
        speed = "stopped"
    exits = "no tokens" if stats.n_tokens == 0 else f"mean exit layer {stats.mean_exit_layer:.1f}/{n_layer}"
    parts = [f"{len(turn.exit_layers)} tokens", prompt, f"generation {speed}", exits]
    if r is not None and r.speculative is not None:
        parts.append(f"{100 * r.speculative.acceptance_rate:.0f}% of drafts accepted")
        speedup = r.speculative.round_times.speedup()
        if speedup is not None:
            parts.append(f"about {speedup:.2f}x plain decoding")
    if turn.dropped_turns:
        parts.append(f"{turn.dropped_turns} oldest exchange(s) dropped to fit the context")
    return "[" + " | ".join(parts) + "]"


# ---------------------------------------------------------------- the REPL


def _lines(stdin: TextIO, interactive: bool, prompt: str) -> Iterator[str]:
    """Input lines (without newline); a KeyboardInterrupt at the prompt is yielded as None."""
    while True:
        try:
            if interactive:
                line = input(prompt)
            else:
                line = stdin.readline()
                if not line:
                    return
                line = line.rstrip("\n")
        except EOFError:
            return
        except KeyboardInterrupt:
            yield None  # type: ignore[misc]
            continue
        yield line


def repl(
    session: ChatSession,
    *,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
    min_layer: int = 2,
) -> int:
    """Chat until /exit, end of input or a double Ctrl+C; the exit status."""
    interactive = stdin.isatty()
    model = session.model
    start_policy = session.policy

    def note(text: str) -> None:
        print(text, file=stderr, flush=True)

    def write(text: str) -> None:
        stdout.write(text)
        stdout.flush()

    if interactive:
        note(
            f"river-cpp chat: {model.n_layer} layers, context {model.n_ctx}, "
            f"{session.describe_decode()}. /help for commands."
        )
    last_interrupt = 0.0
    lines = _lines(stdin, interactive, ">>> ")
    for line in lines:
        if line is None:  # Ctrl+C at the prompt
            if time.monotonic() - last_interrupt < DOUBLE_INTERRUPT_SECONDS:
                return 130
            last_interrupt = time.monotonic()
            note("\n(Ctrl+C again or /exit to quit)")
            continue
        text = line.strip()
        if text.startswith(MULTILINE):
            text = _multiline(text[len(MULTILINE) :], lines)
            if text is None:
                continue
        elif not text:
            continue
        elif text.startswith("/"):
            quit_status = _command(text, session, note, start_policy, min_layer)
            if quit_status is not None:
                return quit_status
            continue
        try:
            turn = session.ask(text, write)
        except ValueError as error:
            note(f"error: {error}")
            continue
        except KeyboardInterrupt:
            write("\n")
            if time.monotonic() - last_interrupt < DOUBLE_INTERRUPT_SECONDS:
                return 130
            last_interrupt = time.monotonic()
            note(f"[stopped] {footer(session.turns[-1], model.n_layer)}")
            continue
        write("\n")
        note(footer(turn, model.n_layer))
    return 0


def _multiline(first: str, lines: Iterator[Optional[str]]) -> Optional[str]:
    """A message between two \"\"\" lines (None if cancelled with Ctrl+C)."""
    parts = [first] if first else []
    if first.endswith(MULTILINE):
        return first[: -len(MULTILINE)]
    for line in lines:
        if line is None:
            return None
        if line.rstrip().endswith(MULTILINE):
            parts.append(line.rstrip()[: -len(MULTILINE)])
            break
        parts.append(line)
    text = "\n".join(parts).strip()
    return text or None


def _command(
    text: str, session: ChatSession, note: Callable[[str], None], start_policy: Optional[ExitPolicy], min_layer: int
) -> Optional[int]:
    """Run a /command; an exit status to quit with, or None."""
    name, _, argument = text.partition(" ")
    argument = argument.strip()
    if name in ("/exit", "/quit", "/bye"):
        return 0
    if name == "/help":
        note(HELP)
    elif name == "/reset":
        session.reset()
        note("[conversation forgotten]")
    elif name == "/stats":
        note(session.stats())
    elif name == "/system":
        session.system = argument or None
        note(f"[system prompt {'set' if argument else 'removed'}]")
    elif name == "/tau":
        if argument.lower() in ("off", "default"):
            session.policy = start_policy
        elif argument:
            try:
                policy = ExitPolicy.uniform(float(argument), min_layer=min_layer)
                session.model.decoding("repl", policy=policy)  # ValueError where it does not apply
                session.policy = policy
            except ValueError as error:
                note(f"error: /tau needs a number (e.g. /tau 0.98) and a model with a river: {error}")
                return None
        note(f"[decode: {session.describe_decode()}]")
    else:
        note(f"unknown command {name}; /help lists them")
    return None
