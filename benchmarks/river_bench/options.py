"""The options every measurement script shares, declared once: the model file, CPU
threads, the prompt set and how many of its prompts, and the tokens to generate.

The scripts in benchmarks/ build their parsers from these; `-t` is the CLI's own
declaration (river_cpp.apps.cli._common.add_threads_argument), so that it means the
same and defaults the same everywhere (the physical performance cores).
"""

from __future__ import annotations

import argparse

from river_bench.prompts import PROMPT_SETS

DEFAULT_N_PROMPTS = 4
DEFAULT_TOKENS = 128


def add_model_argument(parser: argparse.ArgumentParser, *, required: bool = True, help: str = "backbone GGUF") -> None:
    """-m/--model: a GGUF file (None when not `required` and not given)."""
    parser.add_argument("-m", "--model", required=required, metavar="PATH", help=help)


def add_prompts_argument(parser: argparse.ArgumentParser, *, default: str = "chat") -> None:
    """--prompts: the prompt set (corpus.prompt_set), and --n-prompts: how many of it."""
    parser.add_argument("--prompts", choices=PROMPT_SETS, default=default, help=f"prompt set (default {default})")
    parser.add_argument(
        "--n-prompts",
        type=int,
        default=DEFAULT_N_PROMPTS,
        metavar="N",
        help=f"prompts of the set (default {DEFAULT_N_PROMPTS})",
    )


def add_tokens_argument(
    parser: argparse.ArgumentParser, *, default: int = DEFAULT_TOKENS, help: str = "tokens to generate per prompt"
) -> None:
    """-n/--max-tokens: tokens to generate (also accepted as --n-tokens)."""
    parser.add_argument(
        "-n",
        "--max-tokens",
        "--n-tokens",
        dest="max_tokens",
        type=int,
        default=default,
        metavar="N",
        help=f"{help} (default {default})",
    )
