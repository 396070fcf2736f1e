"""river_cpp.completions.output_text on byte pieces written by hand: the text and stream
chunks llama-cpp-python 0.3.36 gives (tests/apps/dropin/test_compat.py checks the same
rules against llama_cpp.Llama on a real model)."""

from __future__ import annotations

from river_cpp.completions.output_text import CompletionText


def stream(pieces: list[bytes], stop: tuple[str, ...] = (), *, each_token: bool = False):
    """What a stream gives after each piece, then at the end, as (text, n_tokens); and the text."""
    text = CompletionText(stop, each_token=each_token)
    steps = [[(p.text, p.n_tokens) for p in text.push(piece)] for piece in pieces]
    steps.append([(p.text, p.n_tokens) for p in text.finish()])
    return steps, text.text


def test_an_invalid_byte_is_dropped_and_holds_the_stream_to_its_end():
    steps, text = stream([b" a", b"\xad", b" b"])
    assert text == " a b"
    assert steps == [[(" a", 1)], [], [], [("", 1), (" b", 1)]]


def test_a_character_split_across_tokens_waits_for_its_last_byte():
    steps, text = stream([b" a", b"\xe4", b"\xb8", b"\xad", b" b"])  # 中 is E4 B8 AD
    assert text == " a\u4e2d b"
    assert steps == [[(" a", 1)], [], [], [("\u4e2d", 3)], [(" b", 1)], []]


def test_a_character_cut_short_is_dropped():
    steps, text = stream([b" a", b"\xe4", b"\xb8"])
    assert text == " a"
    assert steps[-1] == [("", 1), ("", 1)]


def test_text_that_may_begin_a_stop_string_waits_and_the_stop_cuts_it():
    steps, text = stream([b" Q", b"uestion", b" Q", b":", b" more"], stop=("Q:",))
    assert text == " Question "
    assert steps == [[], [(" Q", 1), ("uestion", 1)], [], [], [], [(" ", 1)]]


def test_with_logprobs_each_token_is_its_own_chunk():
    steps, text = stream([b" a", b"\xe4", b"\xb8", b"\xad"], each_token=True)
    assert text == " a\u4e2d"
    assert steps == [[(" a", 1)], [], [], [("", 1), ("", 1), ("", 1)], []]


def test_tokens_after_a_stop_string_are_no_completion_tokens():
    text = CompletionText(("\n",))
    for piece in (b" Paris", b".\n", b"Q"):
        text.push(piece)
    assert text.stopped and text.n_tokens == 2 and text.text == " Paris."
