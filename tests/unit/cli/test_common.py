"""What the commands share: a `SparkiqError` or Ctrl-C becomes an exit status, and bad Kafka
settings a usage error."""

from __future__ import annotations

import click
import pytest

from sparkiq.cli.common import kafka_security, run_command
from sparkiq.core.errors import SparkiqError


def test_a_sparkiq_error_exits_2_with_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise SparkiqError("table 'users' is not in the catalog")

    with pytest.raises(SystemExit) as info:
        run_command(fail)
    assert info.value.code == 2
    assert capsys.readouterr().err == "sparkiq: table 'users' is not in the catalog\n"


def test_ctrl_c_exits_130() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as info:
        run_command(interrupted)
    assert info.value.code == 130


def test_a_bad_kafka_property_is_a_usage_error_with_the_fix() -> None:
    with pytest.raises(click.UsageError, match=r"did you mean 'security\.protocol'"):
        kafka_security(None, ("security.protocl=SSL",))
