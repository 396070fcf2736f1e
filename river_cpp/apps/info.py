"""What river-cpp runs on, for users and bug reports (`river-cpp info`): versions, ggml's
backends and devices, the CPU, its default threads and their wait policy, its extra
buffer types, our own products' and attention's kernels, RPC, the cache folder.

Asks no RPC server (a server that went away would abort the process) and loads no model.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Mapping

MIB = 1 << 20
GIB = 1 << 30


def system_info(*, reprobe: bool = False) -> dict[str, Any]:
    """This host as river-cpp sees it, as plain data (JSON-serializable):

    {"river_cpp", "llama_cpp_python", "ggml" {"version", "commit"}, "python",
    "platform", "backends" [names], "devices" [{"name", "description", "type",
    "memory_free", "memory_total", ...}], "cpu" {"model", "features" {name: value},
    "os_amx_flags" [...]}, "threads" {"default", "reason", "wait_policy" {"settings",
    "source", "description"}}, "extra_buffer_types" {"mode", "available", "allowed",
    "verdicts" {name: {"usable", "reason"}}}, "own_products" {"mode", "kernels", "types",
    "reason", "kernels_here"}, "own_attention" {"kernels_here"}, "rpc" bool, "cache"
    {"path", "bytes"}}.

    reprobe: probe the CPU's extra buffer types and our own products' kernels again
    instead of reading the cache.
    """
    import llama_cpp

    import river_cpp
    from river_cpp._cpus import default_thread_choice, wait_policy
    from river_cpp.engine import _core
    from river_cpp.engine.files.cache import cache_dir
    from river_cpp.engine.probes.extra_bufts import cpu_model, extra_bufts
    from river_cpp.engine.probes.own_products import own_products

    decision = extra_bufts(reprobe=reprobe)
    own = own_products(reprobe=reprobe)
    cache = cache_dir()
    threads = default_thread_choice()
    waiting = wait_policy()
    return {
        "river_cpp": river_cpp.__version__,
        "llama_cpp_python": llama_cpp.__version__,
        "ggml": _core.ggml_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backends": _core.backends(),
        "devices": _core.devices(),
        "cpu": {
            "model": cpu_model(),
            "features": dict(_core.cpu_features()),
            "os_amx_flags": os_cpu_flags("amx"),
        },
        "threads": {
            "default": threads.n_threads,
            "reason": threads.reason,
            "wait_policy": {
                "settings": dict(waiting.settings),
                "source": waiting.source,
                "description": waiting.describe(),
            },
        },
        "extra_buffer_types": {
            "mode": decision.mode,
            "available": list(decision.available),
            "allowed": list(decision.allowed),
            "verdicts": {n: {"usable": v.usable, "reason": v.reason} for n, v in decision.verdicts.items()},
        },
        "own_products": {
            "mode": own.mode,
            "kernels": own.kernels,
            "types": list(own.types),
            "reason": own.reason,
            "kernels_here": _core.own_kernels(),
        },
        "own_attention": {"kernels_here": _core.own_attention_kernels()},
        "rpc": _core.has_rpc(),
        "cache": {"path": str(cache), "bytes": folder_bytes(cache)},
    }


def os_cpu_flags(prefix: str) -> list[str]:
    """The flags /proc/cpuinfo lists for the first CPU that start with `prefix` (what
    the kernel says the CPU offers, which ggml's features do not: they are what it was
    built for); empty where there is no /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return sorted(flag for flag in value.split() if flag.startswith(prefix))
    except OSError:
        pass
    return []


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walking
                pass
    return total


def format_system_info(info: Mapping[str, Any]) -> str:
    """system_info() as readable lines."""
    ggml = info["ggml"]
    lines = [
        f"river-cpp          {info['river_cpp']}",
        f"llama-cpp-python   {info['llama_cpp_python']}",
        f"ggml               {ggml['version']} ({ggml['commit']})",
        f"python             {info['python']} on {info['platform']}",
        f"backends           {', '.join(info['backends']) or 'none'}",
        f"RPC                {'built in' if info['rpc'] else 'not built in'}",
        "devices:",
    ]
    for d in info["devices"]:
        lines.append(
            f"  {d['name']:<16} {d['type']:<6} {_size(d['memory_free'])} free of {_size(d['memory_total'])}"
            f"  {d['description']}"
        )
    cpu = info["cpu"]
    features = [name if value == "1" else f"{name}={value}" for name, value in cpu["features"].items()]
    lines += [
        f"CPU                {cpu['model']}",
        f"  ggml features    {' '.join(features) or 'none reported'}",
        f"  AMX (OS flags)   {' '.join(cpu['os_amx_flags']) or 'none'}",
    ]
    threads = info["threads"]
    lines += [
        f"threads            {threads['default']} by default ({threads['reason']})",
        f"  OpenMP waiting   {threads['wait_policy']['description']}",
    ]
    extra = info["extra_buffer_types"]
    lines.append(f"CPU extra buffer types (RIVER_CPP_EXTRA_BUFTS={extra['mode']}):")
    for name in extra["available"]:
        verdict = extra["verdicts"].get(name)
        state = "used" if name in extra["allowed"] else "not used"
        why = f"probe: {verdict['reason']}" if verdict else f"not probed ({extra['mode']})"
        lines.append(f"  {name:<16} {state:<9} {why}")
    if not extra["available"]:
        lines.append("  none")
    own = info["own_products"]
    lines.append(
        f"own products       {', '.join(own['types']) or 'none'}"
        + (f" on {own['kernels']}" if own["kernels"] else "")
        + f" ({own['reason']}; kernels here: {', '.join(own['kernels_here'])})"
    )
    lines.append(
        "own attention      on the CPU over a host cache, by default (kernels here: "
        f"{', '.join(info['own_attention']['kernels_here'])}); layers on a device keep ggml's"
    )
    cache = info["cache"]
    lines.append(f"cache              {cache['path']} ({_size(cache['bytes'])})")
    return "\n".join(lines)


def _size(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f} GiB" if n_bytes >= GIB else f"{n_bytes / MIB:.0f} MiB"
