"""A changing status as text: drawn again in place on a terminal, plain lines at most every
few seconds elsewhere, and the last state kept when it ends."""

from __future__ import annotations

from sparkiq.core.statusline import CLEAR_LINE, StatusLine


def test_on_a_terminal_each_state_is_drawn_again_in_place() -> None:
    line = StatusLine(live=True)
    assert line.show("1/3", 0.0) == CLEAR_LINE + "1/3"
    assert line.show("2/3", 0.1) == CLEAR_LINE + "2/3"
    assert line.hide() == CLEAR_LINE  # to write a record above it; `shown` draws it again
    assert line.shown == "2/3"
    assert line.end() == CLEAR_LINE + "2/3\n"  # the last state stays, on its own line
    assert line.end() == ""  # nothing shows any more
    line.show("again", 1.0)
    assert line.clear() == CLEAR_LINE
    assert line.shown == ""
    assert line.hide() == ""


def test_elsewhere_a_state_is_a_plain_line_at_most_every_few_seconds() -> None:
    line = StatusLine(live=False, every_s=5.0)
    out = "".join(line.show(f"{n}/20", 0.5 * n) for n in range(20))  # 9.5 s of states
    assert "\r" not in out
    assert "\x1b" not in out
    assert out == "0/20\n10/20\n"  # at 0 s and 5 s
    assert line.end() == "19/20\n"  # the last state, not written yet
    assert line.hide() == ""
    assert line.clear() == ""


def test_elsewhere_the_end_repeats_nothing_already_written() -> None:
    line = StatusLine(live=False, every_s=5.0)
    assert line.show("done", 0.0) == "done\n"
    assert line.end() == ""
    assert line.end("all ready") == "all ready\n"
    assert StatusLine(live=False).end() == ""  # never shown: nothing to end
