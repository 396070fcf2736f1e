"""benchmarks/: each script is a command line over river_bench (or river_cpp.measure):
it parses its options and calls their functions, defining no function or class but main."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripts_are_found():
    assert {p.name for p in SCRIPTS} >= {"speculative.py", "draft_replay.py", "projection.py", "pareto.py"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_script_defines_only_main_and_answers_help(path: Path, capsys):
    module = _load(path)
    own = [
        name
        for name, value in vars(module).items()
        if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__
    ]
    assert own == ["main"], f"{path.name} holds code of its own: move it to river_bench"
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_package_never_imports_river_bench():
    """river_bench lives outside the wheel: an import of it from river_cpp would break
    every installed copy."""
    package = Path(__file__).resolve().parents[2] / "river_cpp"
    importers = []
    for path in package.rglob("*.py"):
        if "data" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] == "river_bench" for name in names):
                importers.append(str(path.relative_to(package)))
    assert importers == []
