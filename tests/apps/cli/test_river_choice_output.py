"""`river-cpp generate -v` and `river-cpp info MODEL` say which river the default chose
and why, and which timing it rests on."""

import json
import time

from river_cpp.apps.cli import main
from river_cpp.engine.decisions import river_choice
from river_cpp.engine.decisions.river_choice import ACCEPTANCE, Timings

STEEP = {1: 1.0, 2: 1.6, 4: 1.7, 6: 2.5, 9: 2.6}  # a 4-bit backbone's verify on 2 cores


def _no_river_pays(path, river_types, *, n_threads):
    return Timings(STEEP) if not river_types else Timings({1: 1.0}, dict.fromkeys(river_types, 1.0))


def test_generate_verbose_and_info_say_what_was_chosen(tiny_llama4, river_cache, monkeypatch, capsys):
    monkeypatch.setattr(river_choice, "time_costs", _no_river_pays)
    assert main(["generate", "Hello", "--model", str(tiny_llama4), "-n", "3", "-v"]) == 0
    err = capsys.readouterr().err
    assert "river: none (n-gram drafts only): no river would be faster than plain decoding" in err
    assert "river-cpp: attention: river-cpp's own in every layer" in err
    today = time.strftime("%Y-%m-%d")
    assert main(["info", str(tiny_llama4)]) == 0
    out = capsys.readouterr().out
    assert "river: none (n-gram drafts only)" in out
    # the same timing says how many requests a server batches (river_cpp.engine.decisions.parallel_choice)
    assert "parallel: 4 slots: a step batched over 4 sequences costs 1.70 plain steps" in out
    assert "attention: river-cpp's own in every layer" in out
    # this machine's load decides which; either way the line says when the timing was taken
    timing = next(line.strip() for line in out.splitlines() if line.strip().startswith("timing: "))
    assert timing.startswith(("timing: cached, taken " + today, "timing: provisional, taken " + today))
    assert main(["info", str(tiny_llama4), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["river_choice"]["river"] is None
    assert info["parallel"] == {"wanted": 4, "slots": 4, "costs": {"2": 1.6, "3": 1.65, "4": 1.7}}
    assert info["backbone"]["attention"]["plan"] == {"backbone_layers": [""] * 4, "river_layers": []}
    assert {c["river"] for c in info["river_choice"]["candidates"]} == set(ACCEPTANCE)
    assert info["river_choice"]["timing"]["taken"].startswith(today)
    assert info["river_choice"]["timing"]["cached"] == timing.startswith("timing: cached")
