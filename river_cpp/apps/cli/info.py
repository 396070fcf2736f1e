"""`river-cpp info`: what river-cpp runs on (versions, backends and devices, the CPU and
its extra buffer types, RPC, the cache folder), for users and bug reports."""

from __future__ import annotations

import argparse

# The context the KV line of `info MODEL` is stated for (generate's and serve's --n-ctx default).
KV_SHOWN_N_CTX = 2048


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "info", help="print versions, devices, CPU buffer types and the cache folder; with MODEL, its default river"
    )
    p.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="a GGUF backbone: also say which backbone runs it, and which river the default builds for it and why "
        "(times it the first time)",
    )
    p.add_argument(
        "--threads",
        "-t",
        type=int,
        metavar="N",
        help="with MODEL: CPU threads (default: the physical performance cores)",
    )
    p.add_argument("--json", action="store_true", help="print river_cpp.system_info() as JSON")
    p.add_argument(
        "--reprobe",
        action="store_true",
        help="probe the CPU's extra buffer types and our own products' kernels again instead of reading the cache",
    )
    p.add_argument(
        "--retime",
        action="store_true",
        help="with MODEL: time the backbone (and any river whose bytes promise a speed-up) again instead of "
        "reading the cached timings, on a machine that is otherwise idle",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from river_cpp.apps.info import format_system_info, system_info

    info = system_info(reprobe=args.reprobe)
    backbone = choice = parallel = None
    if args.model is not None:
        from river_cpp._cpus import n_threads_or_default
        from river_cpp.engine.decisions.backbone_choice import GRAPH, choose_backbone
        from river_cpp.engine.decisions.parallel_choice import choose_parallel
        from river_cpp.engine.decisions.river_choice import choose_river
        from river_cpp.engine.probes.own_products import NONE, model_products, own_products

        backbone = choose_backbone(args.model)
        info["backbone"] = {"kind": backbone.kind, "arch": backbone.arch, "reason": backbone.reason}
        info["backbone"]["products"] = model_products(args.model, own_products() if backbone.kind == GRAPH else NONE)
        if backbone.kind == GRAPH:
            n_threads = n_threads_or_default(args.threads)
            choice = choose_river(args.model, n_threads=n_threads, retime=args.retime)
            info["river_choice"] = choice.as_dict()
            parallel = choose_parallel(args.model, n_threads=n_threads)  # on the timing just read or taken
            info["parallel"] = parallel.as_dict()
            from river_cpp.engine import _core

            info["backbone"]["kv_bytes_per_sequence"] = _core.kv_cache_bytes(args.model, KV_SHOWN_N_CTX)
            from river_cpp.engine.compute.graph_backbone import planned_attention
            from river_cpp.engine.compute.load_options import LoadOptions
            from river_cpp.engine.compute.placement import describe_attention

            # as the default load on this machine's devices would run it
            plan = planned_attention(args.model, LoadOptions(n_ctx=KV_SHOWN_N_CTX, n_threads=1))
            info["backbone"]["attention"] = {"plan": plan, "description": describe_attention(plan)}
        else:
            from river_cpp.engine.compute.llama_backbone import LlamaCppBackbone, probe_llama_cpp

            info["backbone"]["attention"] = {"plan": None, "description": LlamaCppBackbone.attention}
            # raises where llama.cpp does not load the file either, saying so
            info["backbone"]["memory"] = probe_llama_cpp(args.model)
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(format_system_info(info))
        if backbone is not None:
            print(f"{args.model}\n" + backbone.describe())
            products = info["backbone"]["products"]
            print("matrix products: " + "; ".join(f"{t} x{p['matrices']}: {p['product']}" for t, p in products.items()))
            if "attention" in info["backbone"]:
                print(f"attention: {info['backbone']['attention']['description']}")
            if "kv_bytes_per_sequence" in info["backbone"]:
                mib = info["backbone"]["kv_bytes_per_sequence"] / 2**20
                print(
                    f"KV cache: {mib:.1f} MiB per sequence of {KV_SHOWN_N_CTX} positions (F16); "
                    f"`serve --parallel N` holds N of them"
                )
            if "memory" in info["backbone"]:
                from river_cpp.engine.compute.llama_backbone import MEMORY_NOTES

                memory = info["backbone"]["memory"]
                print(f"memory: {memory} ({MEMORY_NOTES[memory]})")
        if choice is not None:
            print(choice.describe())
        if parallel is not None:
            print(f"{parallel.describe()} (`serve --parallel auto`)")
    return 0
