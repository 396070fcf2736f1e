"""river_bench.options: the benchmark scripts' shared options, one default each."""

from __future__ import annotations

import argparse

import pytest

from river_cpp._cpus import default_n_threads
from river_cpp.apps.cli._common import add_threads_argument

from river_bench.options import (
    DEFAULT_N_PROMPTS,
    DEFAULT_TOKENS,
    add_model_argument,
    add_prompts_argument,
    add_tokens_argument,
)


def _parser(**model) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_model_argument(parser, **model)
    add_threads_argument(parser)
    add_prompts_argument(parser)
    add_tokens_argument(parser)
    return parser


def test_defaults():
    args = _parser(required=False).parse_args([])
    assert args.model is None and args.threads == default_n_threads()
    assert (args.prompts, args.n_prompts, args.max_tokens) == ("chat", DEFAULT_N_PROMPTS, DEFAULT_TOKENS)


def test_short_and_long_names():
    args = _parser().parse_args(["-m", "m.gguf", "-t", "3", "--prompts", "grounded", "--n-prompts", "2", "-n", "9"])
    assert (args.model, args.threads, args.prompts, args.n_prompts, args.max_tokens) == ("m.gguf", 3, "grounded", 2, 9)
    assert _parser().parse_args(["-m", "m", "--n-tokens", "5"]).max_tokens == 5  # the name older commands used
    assert _parser().parse_args(["-m", "m", "--max-tokens", "6"]).max_tokens == 6


def test_bad_values_are_refused(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args([])  # the model is required by default
    with pytest.raises(SystemExit):
        _parser().parse_args(["-m", "m", "--prompts", "poetry"])
    with pytest.raises(SystemExit):
        _parser().parse_args(["-m", "m", "-t", "two"])
