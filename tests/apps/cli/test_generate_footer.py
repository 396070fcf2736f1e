"""`river-cpp generate`'s footer on the demo model answers "was it faster?": the speed
against plain decoding, estimated from the answer's own steps, in words a first run reads."""

import re

from river_cpp.apps.cli import main


def test_the_demo_footer_estimates_the_speed_against_plain_decoding(demo_backbone, river_cache, capsys):
    # n-gram drafts alone (no river to build): on this story a few rounds draft and
    # most decode plain, so the estimate has both kinds of step to compare
    argv = ["generate", "--chat", "Tell me a story about a river.", "--model", str(demo_backbone)]
    assert main([*argv, "-n", "96", "--temperature", "0", "--river", "none"]) == 0
    err = capsys.readouterr().err
    (speed,) = [line for line in err.splitlines() if line.startswith("speed: ")]
    assert re.match(r"speed: about \d+\.\d\dx plain decoding \(an estimate from this answer's own steps", speed)
    rates = [float(x) for x in re.findall(r"at (\d+\.\d) tokens/s", speed)]
    assert len(rates) == 2 and all(rate > 0 for rate in rates)
    assert not any(word in err for word in ("rested", "pays", "reach"))
