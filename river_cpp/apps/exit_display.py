"""Text marked with the depth at which each token left the backbone (`generate --show-exits`).

Owns the depth -> colour buckets, the legend, and the plain markers used when the
output is not a terminal; it knows nothing of models or generation.
"""

from __future__ import annotations

# 256-colour foregrounds from "all river" (blue) to "full backbone" (red).
_COLORS = (33, 37, 41, 178, 208, 196)
_RESET = "\x1b[0m"


class ExitPainter:
    """Paints token text by exit depth: ANSI colours, or `text{layers}` markers."""

    def __init__(self, n_layer: int, *, color: bool) -> None:
        self.n_layer = n_layer
        self.color = color
        self.buckets = self._buckets()

    def _buckets(self) -> list[tuple[int, int]]:
        """Depth ranges [low, high]: 0 alone, the middle in len(_COLORS) - 2 parts, n_layer alone."""
        n, parts = self.n_layer, len(_COLORS) - 2
        if n <= 1:
            return [(0, 0), (n, n)]
        middle = []
        for i in range(parts):
            low, high = 1 + (n - 1) * i // parts, (n - 1) * (i + 1) // parts
            if low <= high:
                middle.append((low, high))
        return [(0, 0), *middle, (n, n)]

    def bucket(self, depth: int) -> int:
        """Index into buckets of `depth` backbone layers."""
        for i, (low, high) in enumerate(self.buckets):
            if low <= depth <= high:
                return i
        return len(self.buckets) - 1

    def _color(self, index: int) -> int:
        if index == len(self.buckets) - 1:
            return _COLORS[-1]
        return _COLORS[min(index, len(_COLORS) - 2)]

    def paint(self, text: str, depth: int) -> str:
        """`text` of a token that ran `depth` backbone layers ("" stays "")."""
        if not text:
            return ""
        if not self.color:
            return f"{text}{{{depth}}}"
        return f"\x1b[38;5;{self._color(self.bucket(depth))}m{text}{_RESET}"

    def legend(self) -> str:
        """One line saying what the colours (or markers) mean."""
        if not self.color:
            return f"[exit depth: each token is followed by {{backbone layers it ran}}, of {self.n_layer}]"
        names = []
        for i, (low, high) in enumerate(self.buckets):
            label = (
                "river"
                if high == 0
                else "backbone"
                if low == self.n_layer
                else f"{low}"
                if low == high
                else f"{low}-{high}"
            )
            names.append(f"\x1b[38;5;{self._color(i)}m■ {label}{_RESET}")
        return f"exit depth (backbone layers of {self.n_layer}): " + " ".join(names)
