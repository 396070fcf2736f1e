"""The text of generated tokens as llama-cpp-python 0.3.36 gives it, from their bytes.

Owns the rules its create_completion follows on the bytes: bytes that are not valid
UTF-8 are dropped (not replaced by U+FFFD), the text ends before the first stop
string, and a stream is cut into the chunks it yields (which tokens wait, and when).
It does not decide when generation stops: river_cpp.decoding.generation does, at the
same token llama-cpp-python stops at; river_cpp.apps.completions frames the pieces.

llama-cpp-python's stream, restated (read from its source, written here anew):

- after each token, the last three bytes of the completion are read for the first
  byte of a multi-byte character still missing bytes; one that is found makes the
  next tokens (one per missing byte, counted from where the byte lies) wait without
  a stop check or any text;
- otherwise, once no stop string is in the completion, the text not yet given is
  given in the shortest runs of tokens that decode as strict UTF-8, each run its
  own chunk, up to the bytes that could begin a stop string; a run that never
  decodes (invalid bytes) holds everything after it until the end;
- with logprobs, each token is its own chunk instead, its bytes decoded alone;
- at the end, the tokens not yet given are given one chunk each, their bytes
  decoded alone, the last one cut where the first stop string begins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

# The first byte of a multi-byte UTF-8 character, by its top bits, and the
# character's length in bytes (llama-cpp-python tests the widest last, so a byte
# 0xF8-0xFF counts as the first of four).
_LEAD_BITS = ((0xF0, 4), (0xE0, 3), (0xC0, 2))
# How many trailing bytes that test reads.
_TAIL = 3
# Python's reason for bytes that end inside a character (more bytes may complete it).
_INCOMPLETE = "unexpected end of data"


def _character_length(byte: int) -> int:
    """The length a lead byte announces (0 for a byte that is no lead byte)."""
    for bits, length in _LEAD_BITS:
        if byte & bits == bits:
            return length
    return 0


def _decoded(data: bytes) -> str:
    """`data` as text, invalid UTF-8 dropped (llama-cpp-python's rule)."""
    return data.decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class TextPiece:
    """One chunk of a stream's text and how many generated tokens it covers (the next
    ones not yet covered: their logprobs go with it)."""

    text: str
    n_tokens: int


class CompletionText:
    """The completion's text from its tokens' bytes, pushed one token at a time (an
    end-of-generation token is not pushed: it has no text and is no completion token).

    push() returns the pieces a stream gives after that token, finish() those it gives
    at the end; `text` is the whole completion's text (a call without stream).
    `each_token`: a stream with logprobs, one piece per token.
    """

    def __init__(self, stop: Sequence[str] = (), *, each_token: bool = False) -> None:
        self._stop = [s.encode("utf-8") for s in stop]
        self._each_token = each_token
        self._pieces: list[bytes] = []
        self._bytes = b""
        self._given = 0  # tokens whose text a piece gave
        self._waiting = 0  # tokens still to wait for a character's missing bytes
        self.stopped = False  # a stop string is in the completion

    @property
    def n_tokens(self) -> int:
        """The completion's tokens (those pushed)."""
        return len(self._pieces)

    @property
    def text(self) -> str:
        """The completion's text: its bytes up to the first stop string found (in the
        order the stop strings were given), invalid UTF-8 dropped."""
        whole = self._bytes
        found = next((s for s in self._stop if s in whole), None)
        return _decoded(whole if found is None else whole[: whole.index(found)])

    def push(self, piece: bytes) -> list[TextPiece]:
        """Add one token's bytes; the pieces a stream gives now."""
        if self.stopped:  # llama-cpp-python generated nothing more
            return []
        self._pieces.append(piece)
        self._bytes += piece
        if self._waits():
            return []
        if any(s in self._bytes for s in self._stop):
            self.stopped = True
            return []
        return self._give()

    def finish(self) -> list[TextPiece]:
        """The pieces a stream gives once generation has ended: each token not given
        yet alone, up to the first stop string among them."""
        rest = self._pieces[self._given :]
        tail = b"".join(rest)
        starts = [tail.index(s) for s in self._stop if s in tail]
        end = min(starts) if starts else len(tail)
        out: list[TextPiece] = []
        used = 0
        for piece in rest:
            used += len(piece)
            if used >= end:
                out.append(TextPiece(_decoded(piece[: len(piece) - (used - end)]), 1))
                break
            out.append(TextPiece(_decoded(piece), 1))
        self._given = len(self._pieces)
        return out

    def _waits(self) -> bool:
        """Whether this token waits for the rest of a multi-byte character."""
        tail = self._bytes[-_TAIL:]
        for i, byte in enumerate(tail):
            distance = _TAIL - i  # counted as if the tail always held three bytes
            length = _character_length(byte)
            if length > distance:
                self._waiting = length - distance
        if self._waiting > 0:
            self._waiting -= 1
            return True
        return False

    def _held(self, tail: bytes) -> int:
        """How many bytes at the end of `tail` may begin a stop string."""
        held = 0
        for stop in self._stop:
            for length in range(min(len(stop), len(tail)), held, -1):
                if tail.endswith(stop[:length]):
                    held = length
                    break
        return held

    def _give(self) -> list[TextPiece]:
        tail = b"".join(self._pieces[self._given :])
        limit = len(tail) - self._held(tail)
        out: list[TextPiece] = []
        used = 0
        while self._given < len(self._pieces):
            run = 1 if self._each_token else self._decodable_run()
            if run is None:
                break
            data = b"".join(self._pieces[self._given : self._given + run])
            used += len(data)
            if used > limit:
                break
            out.append(TextPiece(_decoded(data), run))
            self._given += run
        return out

    def _decodable_run(self) -> Optional[int]:
        """The fewest tokens from the first not given whose bytes decode as strict UTF-8
        (None: none do, nor will any with more tokens after them)."""
        data = b""
        for n, piece in enumerate(self._pieces[self._given :], start=1):
            data += piece
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as error:
                if error.reason != _INCOMPLETE:  # invalid bytes: no longer run decodes either
                    return None
                continue
            return n
        return None
