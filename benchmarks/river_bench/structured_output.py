"""Structured output (JSON schema) speed: river-cpp's drafted constrained decoding
against its own plain constrained decoding and against llama-cpp-python's, on the
same file, greedy, with token identity checked.

Two JSON tasks: extraction from a pasted text into a schema, and a list of records
from a pasted table. Each repeat runs every configuration once, interleaved, so that
the load of a shared machine spreads over all of them; the table gives medians and
their ratios to river-cpp's plain constrained decoding.

    python benchmarks/structured_output.py [--model PATH] [-r 3] [-t 2] [--json out.json]

Default model: the demo model's F16 backbone (SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable, Optional, Sequence

EXTRACTION_TEXT = (
    "Maria Alvarez, 34, joined Northwind Robotics in Lyon in March 2019 as a senior firmware engineer. "
    "She leads a team of six, writes C and Rust, and mentors two interns each summer. Her email is "
    "maria.alvarez@northwind.example and her phone is +33 4 72 00 11 22. Before Northwind she worked "
    "five years at Helio Systems in Grenoble on battery controllers."
)
EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "company": {"type": "string"},
        "city": {"type": "string"},
        "role": {"type": "string"},
        "email": {"type": "string"},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 6},
        "previous_employer": {"type": "string"},
    },
    "required": ["name", "age", "company", "city", "role", "email", "languages", "previous_employer"],
    "additionalProperties": False,
}
RECORDS_TABLE = """| river | country | length_km | mouth |
|---|---|---|---|
| Loire | France | 1006 | Atlantic Ocean |
| Rhone | France | 813 | Mediterranean Sea |
| Seine | France | 777 | English Channel |
| Garonne | France | 529 | Atlantic Ocean |
| Rhine | Germany | 1233 | North Sea |
| Elbe | Germany | 1094 | North Sea |"""
RECORDS_SCHEMA = {
    "type": "object",
    "properties": {
        "rivers": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "properties": {
                    "river": {"type": "string"},
                    "country": {"type": "string"},
                    "length_km": {"type": "integer"},
                    "mouth": {"type": "string"},
                },
                "required": ["river", "country", "length_km", "mouth"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["rivers"],
    "additionalProperties": False,
}
TASKS = {
    "extraction": (
        f"Extract the person described in this text as JSON.\n\n{EXTRACTION_TEXT}",
        EXTRACTION_SCHEMA,
    ),
    "records": (
        f"Convert every row of this table to a JSON record, in order.\n\n{RECORDS_TABLE}",
        RECORDS_SCHEMA,
    ),
}


def _run(call: Callable[[], dict[str, Any]]) -> tuple[str, float, int]:
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    return result["choices"][0]["message"]["content"], seconds, result["usage"]["completion_tokens"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="GGUF file (default: the demo model's F16 backbone)")
    parser.add_argument("-r", "--repeats", type=int, default=3)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args(argv)

    import river_cpp
    from river_cpp import Speculative
    from river_cpp.apps.demo import demo_backbone_path
    from river_cpp.engine.compute.llama_backbone import load_llama

    path = args.model or str(demo_backbone_path())
    # without the CPU's extra buffer types where they fail here (an AMX host faults on them)
    reference = load_llama(path, n_ctx=2048, n_threads=args.threads, verbose=False)
    ours = river_cpp.Llama(model_path=path, n_ctx=2048, n_threads=args.threads, verbose=False)

    def configs(messages: list[dict], schema: dict) -> dict[str, Callable[[], dict[str, Any]]]:
        options = {
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "response_format": {"type": "json_object", "schema": schema},
        }

        def river(speculative: Any) -> Callable[[], dict[str, Any]]:
            def call() -> dict[str, Any]:
                ours.reset()  # every configuration prefills the whole prompt
                return ours.create_chat_completion(messages, speculative=speculative, **options)

            return call

        def llama() -> dict[str, Any]:
            reference.reset()
            return reference.create_chat_completion(messages, **options)

        return {
            "llama-cpp-python": llama,
            "river plain": river(False),
            "river ngram": river(Speculative(draft="ngram")),
            "river river+ngram": river(None),  # the model's default draft
        }

    runs: list[dict[str, Any]] = []
    tasks = {name: TASKS[name] for name in args.tasks}
    for task, (prompt, schema) in tasks.items():
        messages = [{"role": "user", "content": prompt}]
        calls = configs(messages, schema)
        for repeat in range(args.repeats):
            for name, call in calls.items():
                text, seconds, tokens = _run(call)
                runs.append(
                    {"task": task, "config": name, "repeat": repeat, "seconds": seconds, "tokens": tokens, "text": text}
                )
                print(f"{task} {name} #{repeat}: {tokens} tokens in {seconds:.2f} s", flush=True)
                if args.json:  # after every run: a long benchmark stopped early keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump({"model": path, "threads": args.threads, "runs": runs}, f, indent=1)

    print("\n| task | configuration | tokens | median s | ratio to river plain | same text as river plain |")
    print("|---|---|---|---|---|---|")
    for task in tasks:
        mine = [r for r in runs if r["task"] == task]
        plain = [r for r in mine if r["config"] == "river plain"]
        plain_seconds = statistics.median(r["seconds"] for r in plain)
        for name in dict.fromkeys(r["config"] for r in mine):
            these = [r for r in mine if r["config"] == name]
            seconds = statistics.median(r["seconds"] for r in these)
            same = all(r["text"] == plain[0]["text"] for r in these)
            print(
                f"| {task} | {name} | {these[0]['tokens']} | {seconds:.2f} | {plain_seconds / seconds:.2f}x | "
                f"{'yes' if same else 'NO'} |"
            )
    for task in tasks:
        text = next(r["text"] for r in runs if r["task"] == task and r["config"] == "river plain")
        try:
            json.loads(text)
            valid = "valid JSON"
        except ValueError:
            valid = "NOT valid JSON (cut by max_tokens?)"
        print(f"{task}: {valid}: {text[:160]!r}")


if __name__ == "__main__":
    main()
