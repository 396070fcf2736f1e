"""Lossless decoding against the backbone and llama.cpp: decode tokens/s, interleaved
(river_bench.lossless: what each part measures and each column means).

    python benchmarks/speculative.py -m BACKBONE.gguf --drafts river ngram river+ngram \\
        --peers F16 --prompt-lookup --draft-model SMALL.gguf --prompts grounded -t 2 -r 2 \\
        --json out.json

1. Costs: the backbone's verify time V(n)/V(1) for n = 1..--max-verify positions, and
   one drafted token of each river relative to one backbone token.
2. Decode speed: every configuration generates the same continuation of each prompt
   (`-n` tokens), configurations interleaved per prompt, `-r` rounds; lossless rows
   also give acceptance, token identity with the backbone, draft sources, in-loop
   costs and the ceiling at full acceptance. --temperature samples instead (the same
   seed per prompt and round). --prompt-lookup adds llama-cpp-python's
   LlamaPromptLookupDecoding on the backbone file.
Ratios are to our backbone in the same run. Say the machine's load with the numbers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument
from river_cpp.decoding.presets import LOSSLESS
from river_cpp.decoding.speculative_options import DEFAULT_DRAFT, DEFAULT_DRAFT_VOCAB, DRAFTS
from river_cpp.engine.files.river import DEFAULT_RIVER_TYPE

from river_bench import lossless, options
from river_bench.prompts import prompt_set


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_model_argument(p, help="backbone GGUF (F16 or quantized)")
    p.add_argument(
        "--rivers",
        nargs="+",
        default=[DEFAULT_RIVER_TYPE],
        help=f"river types to draft with (default {DEFAULT_RIVER_TYPE})",
    )
    p.add_argument(
        "--heads",
        nargs="+",
        default=[LOSSLESS.river_head],
        metavar="TYPE",
        help=f"LM head types of each river (a cheaper head drafts faster; default {LOSSLESS.river_head})",
    )
    p.add_argument(
        "--drafts",
        nargs="+",
        choices=DRAFTS,
        default=[DEFAULT_DRAFT],
        help=f"draft sources of each river's lossless rows (default {DEFAULT_DRAFT})",
    )
    p.add_argument(
        "--prompt-lookup",
        action="store_true",
        help="add llama-cpp-python's LlamaPromptLookupDecoding on the backbone file",
    )
    p.add_argument(
        "--fixed",
        type=int,
        nargs="*",
        default=[],
        metavar="K",
        help="also each river at a fixed draft length K (not adaptive)",
    )
    p.add_argument(
        "--p-min",
        type=float,
        nargs="+",
        default=None,
        help="draft p_min (default: Speculative's); several values give each lossless row once per value",
    )
    p.add_argument(
        "--draft-vocabs",
        type=int,
        nargs="+",
        default=[DEFAULT_DRAFT_VOCAB or 0],
        metavar="N",
        help="river draft vocabularies (Speculative.draft_vocab) to compare; 0: all"
        f" (default {DEFAULT_DRAFT_VOCAB or 0})",
    )
    p.add_argument(
        "--peers",
        nargs="*",
        default=["F16", "Q8_0", "Q4_K_M"],
        help="llama.cpp on the backbone (F16) and its quantizations",
    )
    p.add_argument("--draft-model", help="a smaller GGUF with the same vocabulary drafting for the backbone")
    options.add_prompts_argument(p)
    options.add_tokens_argument(p)
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sample at this temperature (default 0: greedy); lossless rows are compared with the "
        "backbone's plain run of the same seed",
    )
    p.add_argument("-r", "--rounds", type=int, default=3)
    add_threads_argument(p)
    p.add_argument("--max-verify", type=int, default=16)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    backbone = Path(args.model)
    configs, rivers = lossless.configurations(
        backbone,
        rivers=args.rivers,
        heads=args.heads,
        drafts=args.drafts,
        draft_vocabs=args.draft_vocabs,
        p_mins=args.p_min,
        fixed=args.fixed,
        draft_model=args.draft_model,
        peers=args.peers,
        prompt_lookup=args.prompt_lookup,
        n_ctx=2048,
        threads=args.threads,
    )
    base = configs[0].model
    prompts = prompt_set(base.tokenizer, args.prompts, args.n_prompts)
    context = base.tokenize(prompts[0], add_bos=True, special=True)
    costs = lossless.measure_costs(base, rivers, context, args.max_verify, args.draft_vocabs)
    print("V(n)/V(1):", " ".join(f"{n}:{v:.2f}" for n, v in costs["verify_ratio"].items()))
    print("draft/backbone token:", " ".join(f"{r}:{v:.2f}" for r, v in costs["draft_ratio"].items()))

    load = lossless.decode(configs, prompts, args.max_tokens, args.temperature, args.rounds)
    rows = lossless.rows(configs, args.temperature)
    print("\n".join(lossless.table_lines(rows)))
    print(f"load average (1 min) before {load[0]:.2f}, after {load[1]:.2f}")
    if args.json:
        report = {
            "model": backbone.name,
            "prompts": args.prompts,
            "n_prompts": len(prompts),
            "n_tokens": args.max_tokens,
            "temperature": args.temperature,
            "rounds": args.rounds,
            "threads": args.threads,
            "costs": costs,
            "weight_bytes": lossless.weight_bytes(backbone, rivers),
            "rows": rows,
            "load": list(load),
        }
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
