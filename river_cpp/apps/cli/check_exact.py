"""`river-cpp check-exact MODEL`: whether a verify's rows equal plain decoding's steps on
this host, bit for bit, and which ops make them differ (river_cpp.measure.check_exact)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from river_cpp.apps.cli._common import add_threads_argument

    p = subparsers.add_parser(
        "check-exact",
        help="compare each row of k-row forwards (k = 2..9) with the same token's one-token step, per op",
    )
    p.add_argument("model", metavar="MODEL", help="GGUF file")
    add_threads_argument(p)
    p.add_argument(
        "--exact",
        choices=("on", "bitwise", "off"),
        nargs="+",
        default=["off", "on", "bitwise"],
        help="engine modes the forward check runs (default: all three; off: ggml's kernels by batch size)",
    )
    p.add_argument(
        "--extra-bufts",
        default="auto",
        metavar="MODE",
        help="the CPU's extra buffer types the engine may repack into: auto (those the probe passed), none, "
        "repack, all (default: auto)",
    )
    p.add_argument("--depths", default="100,600", metavar="D,...", help="cached positions before the rows (100,600)")
    p.add_argument("--max-k", type=int, default=9, metavar="K", help="largest batch compared (9)")
    p.add_argument("--no-ops", action="store_true", help="skip the per-product measurement")
    p.add_argument(
        "--ggml-attention",
        action="store_true",
        help="the forward checks attend by ggml's attention (own_attention=False) instead of river-cpp's own",
    )
    p.add_argument(
        "--thread-counts",
        default="",
        metavar="N,...",
        help="also compare the logits of engines with these thread counts (e.g. 1,2,4)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from river_cpp.engine._ggml import set_ggml_verbosity
    from river_cpp.engine.probes.extra_bufts import extra_bufts
    from river_cpp.engine.probes.own_products import own_products
    from river_cpp.measure.check_exact import format_forward, format_ops, forward_check, op_table, threads_check

    set_ggml_verbosity(False)
    ks = tuple(range(2, args.max_k + 1))
    bufts = extra_bufts(args.extra_bufts)
    own = own_products()
    print(f"threads {args.threads}; extra buffer types allowed: {', '.join(bufts.allowed) or 'none'}")
    print(f"own products: {', '.join(own.types) or 'none'} ({own.reason})")
    print("attention: " + ("ggml's (--ggml-attention)" if args.ggml_attention else "river-cpp's own"))
    if not args.no_ops:
        print("\n## Products: a row of a k-column batch against the same column alone, largest |difference|\n")
        table = op_table(args.model, ks=ks, n_threads=args.threads, buffer_types=bufts.allowed, own_kernels=own.kernels)
        print(format_ops(table))
    depths = tuple(int(d) for d in args.depths.split(","))
    for mode in args.exact:
        print(f"\n## Forward, exact={mode}: row i of a k-row forward against plain decoding's step, per node\n")
        check = forward_check(
            args.model,
            depths=depths,
            ks=ks,
            n_threads=args.threads,
            extra_bufts=bufts.allowed,
            exact=mode,
            own=own,
            own_attention=not args.ggml_attention,
        )
        print(format_forward(check))
        if args.thread_counts:
            counts = tuple(int(n) for n in args.thread_counts.split(","))
            diffs = threads_check(
                args.model,
                counts,
                extra_bufts=bufts.allowed,
                exact=mode,
                own=own,
                own_attention=not args.ggml_attention,
            )
            print("\nlargest |logit difference| from", counts[0], "threads:", diffs)
    return 0
