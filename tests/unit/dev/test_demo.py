"""How the demo ends and says so (sparkiq/dev/demo.py): its line once it is up, and its last
words, for --duration, Ctrl-C, SIGTERM and a failure. (The demo itself needs Spark and
minutes; its parts run in the end-to-end tests.)"""

from __future__ import annotations

import os
import signal
import time

import pytest

from sparkiq.core.errors import SparkiqError
from sparkiq.dev.demo import DemoEnd, how_it_ends, last_words, run_to_its_end


def test_with_a_duration_the_demo_does_not_say_ctrl_c_stops_everything() -> None:
    assert how_it_ends(None).endswith("Ctrl-C stops everything.")
    with_duration = how_it_ends(60.0)
    assert "Ctrl-C stops everything" not in with_duration
    assert "everything stops in 60 s (--duration), or at Ctrl-C" in with_duration


def test_the_last_words_say_how_it_ended() -> None:
    assert last_words(DemoEnd.DURATION, 60.0).startswith("demo stopped after 60 s (--duration)")
    assert last_words(DemoEnd.DURATION, 2.5).startswith("demo stopped after 2.5 s")
    assert last_words(DemoEnd.INTERRUPTED, None).startswith("demo interrupted (Ctrl-C)")
    assert last_words(DemoEnd.INTERRUPTED, 60.0).startswith("demo interrupted (Ctrl-C)")
    assert last_words(DemoEnd.TERMINATED, None).startswith("demo stopped by SIGTERM")
    assert last_words(DemoEnd.FAILED, None).startswith("demo failed")
    for end in DemoEnd:
        assert last_words(end, 60.0).endswith("everything it started is stopped.")


def test_a_run_that_returns_ran_its_duration() -> None:
    assert run_to_its_end(lambda: None) is DemoEnd.DURATION


def test_ctrl_c_and_sigterm_end_a_run_as_such_and_a_failure_goes_through() -> None:
    def interrupted_by(sig: signal.Signals) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the signal's exception comes first
        raise AssertionError("not interrupted")

    assert run_to_its_end(lambda: interrupted_by(signal.SIGINT)) is DemoEnd.INTERRUPTED
    previous = signal.getsignal(signal.SIGTERM)
    assert run_to_its_end(lambda: interrupted_by(signal.SIGTERM)) is DemoEnd.TERMINATED
    assert signal.getsignal(signal.SIGTERM) == previous  # put back

    def failing() -> None:
        raise SparkiqError("the pipeline exited")

    with pytest.raises(SparkiqError):
        run_to_its_end(failing)
