"""One structured-output flow through instructor and one through outlines, whole calls,
river_cpp.Llama (the default: drafted where a draft pays) against llama_cpp.Llama on
the same file and thread count, greedy. Needs the [compat] extra.

    python benchmarks/framework_structured.py MODEL.gguf [MODEL.gguf ...] [-t 2] [-r 3]

instructor's JSON_SCHEMA mode sends OpenAI's json_schema response_format; llama-cpp-
python 0.3.36 does not constrain by that form, so its calls are sent its own form of
the same schema ({"type": "json_object", "schema": ...}): both engines then decode
under the same grammar. outlines runs its logits processor on each step, so river-cpp
decodes those calls plainly (no drafts). Each row: the median whole-call time of r
repetitions after one warm-up call, and whether the two engines' texts are equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Optional, Sequence

import llama_cpp.llama
import pydantic

import river_cpp


class Repository(pydantic.BaseModel):
    name: str
    language: str
    stars: int
    topics: list[str]


# One prompt per call (the warm-up and each repetition): a repeated request would be
# drafted whole from river-cpp's memory of earlier calls, which is not what is measured.
PROMPTS = [
    f"The repository {name} is written in {language}, has {stars} stars and is about {about}. Extract it as JSON."
    for name, language, stars, about in [
        ("ggml-org/llama.cpp", "C++", 80000, "LLM inference, quantization and GGUF"),
        ("pallets/flask", "Python", 69000, "web frameworks and WSGI"),
        ("rust-lang/cargo", "Rust", 13000, "package management and builds"),
        ("golang/go", "Go", 128000, "compilers and a standard library"),
        ("numpy/numpy", "Python", 29000, "arrays and linear algebra"),
        ("denoland/deno", "Rust", 100000, "JavaScript runtimes and security"),
    ]
]


def _instructor_flow(llm: Any, *, translate: bool) -> Callable[[str], str]:
    import instructor

    def create(*args: Any, **kwargs: Any) -> Any:
        if translate:  # llama-cpp-python's own form of the same schema
            schema = kwargs["response_format"]["json_schema"]["schema"]
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        return llm.create_chat_completion_openai_v1(*args, **kwargs)

    client = instructor.patch(create=create, mode=instructor.Mode.JSON_SCHEMA)

    def flow(prompt: str) -> str:
        answer = client(
            messages=[{"role": "user", "content": prompt}],
            response_model=Repository,
            max_tokens=160,
            temperature=0,
            max_retries=0,
        )
        return answer.model_dump_json()

    return flow


def _outlines_flow(llm: Any) -> Callable[[str], str]:
    import outlines

    model = outlines.from_llamacpp(llm)
    return lambda prompt: model(prompt, Repository, max_tokens=160, temperature=0)


def _timed(flow: Callable[[str], str], repetitions: int) -> tuple[float, list[str]]:
    """The median seconds of `repetitions` calls after a warm-up, and every call's text."""
    texts = [flow(PROMPTS[0])]
    seconds = []
    for prompt in PROMPTS[1 : repetitions + 1]:
        start = time.perf_counter()
        texts.append(flow(prompt))
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), texts


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-r", "--repetitions", type=int, default=3, choices=range(1, len(PROMPTS)))
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args(argv)
    print("| model | flow | llama-cpp-python s | river-cpp s | speedup | same text (calls) |")
    print("|---|---|---:|---:|---:|---|")
    for path in args.models:
        options = dict(model_path=path, n_ctx=args.n_ctx, n_threads=args.threads, verbose=False)
        reference = llama_cpp.llama.Llama(**options)
        ours = river_cpp.Llama(**options)
        flows = {
            "instructor": (_instructor_flow(reference, translate=True), _instructor_flow(ours, translate=False)),
            "outlines": (_outlines_flow(reference), _outlines_flow(ours)),
        }
        for name, (theirs, mine) in flows.items():
            their_s, their_texts = _timed(theirs, args.repetitions)
            my_s, my_texts = _timed(mine, args.repetitions)
            same = sum(a == b for a, b in zip(their_texts, my_texts))
            print(
                f"| {os.path.basename(path)} | {name} | {their_s:.2f} | {my_s:.2f} | "
                f"{their_s / my_s:.2f}x | {same}/{len(my_texts)} |",
                flush=True,
            )
            for a, b in zip(their_texts, my_texts):
                if a != b:
                    print(f"  differs: llama-cpp-python {a!r}\n           river-cpp        {b!r}", file=sys.stderr)
        ours.close()
        reference.close()


if __name__ == "__main__":
    main()
