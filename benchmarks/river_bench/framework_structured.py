"""One structured-output flow through instructor and one through outlines, as callables
the benchmark (benchmarks/framework_structured.py) times on llama_cpp.Llama and on
river_cpp.Llama. Needs the [compat] extra.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import pydantic


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


def instructor_flow(llm: Any, *, translate: bool) -> Callable[[str], str]:
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


def outlines_flow(llm: Any) -> Callable[[str], str]:
    import outlines

    model = outlines.from_llamacpp(llm)
    return lambda prompt: model(prompt, Repository, max_tokens=160, temperature=0)


def timed(flow: Callable[[str], str], repetitions: int) -> tuple[float, list[str]]:
    """The median seconds of `repetitions` calls after a warm-up, and every call's text."""
    texts = [flow(PROMPTS[0])]
    seconds = []
    for prompt in PROMPTS[1 : repetitions + 1]:
        start = time.perf_counter()
        texts.append(flow(prompt))
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), texts
