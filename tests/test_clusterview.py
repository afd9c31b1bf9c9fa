"""`sparkiq cluster --watch` (clusterview.watch_cluster): redraws, and survives dead nodes."""

from __future__ import annotations

import io

from sparkiq.broker import free_port
from sparkiq.clusterview import watch_cluster


def test_watch_renders_each_round_and_goes_on_when_no_node_answers() -> None:
    out = io.StringIO()
    pauses: list[float] = []
    dead = f"http://127.0.0.1:{free_port()}"
    watch_cluster([dead], interval_s=0.5, out=out, rounds=3, sleep=pauses.append)
    text = out.getvalue()
    assert text.count("(every 0.5s)") == 3
    assert text.count("no node answered /v1/metadata") == 3
    assert "\x1b[2J" not in text  # not a terminal: blocks one after another
    assert pauses == [0.5, 0.5]  # no pause after the last round
