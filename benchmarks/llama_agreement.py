"""How far our greedy answers agree with llama-cpp-python's on the same file.

    python benchmarks/llama_agreement.py -m MODEL.gguf -t 2 [--prompts 16] [--chat-prompts 10] [--tokens 128]

Our products add in their own order and quantize the columns their own way (docs/DESIGN.md,
"Our own quantized products"), so a greedy answer can take another token where two are
nearly tied. Per prompt of the input-grounded and chat sets, plain greedy decoding by
llama-cpp-python (the reference), by our graph with our own products and attention (the
default) and by our graph with ggml's kernels (RIVER_CPP_OWN_PRODUCTS=none and
own_attention=False, the control: ggml's kernels and attention, our graph). Reported per
engine: identical answers, tokens until the first difference, and at each parting the
logit gap between the two tokens in llama.cpp's own logits there (a small gap: a
near-tie, which any change of summation order may flip).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from river_cpp.apps.cli._common import add_threads_argument

from river_bench.llama_agreement import report, run


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF file")
    add_threads_argument(p)
    p.add_argument("--prompts", type=int, default=16, help="input-grounded prompts")
    p.add_argument("--chat-prompts", type=int, default=10, help="chat prompts")
    p.add_argument("--tokens", type=int, default=128, help="tokens per answer")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    results = run(args.model, {"grounded": args.prompts, "chat": args.chat_prompts}, args.tokens, args.threads)
    print(report(results, args.tokens))
    if args.json:
        document = {"model": Path(args.model).name, "tokens": args.tokens, "results": results}
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
