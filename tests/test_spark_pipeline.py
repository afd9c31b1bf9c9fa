"""Loading pipeline files for `sparkiq run`: clear errors for files that cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkiq.errors import ConfigError
from sparkiq.spark.pipeline import load_pipeline


def test_a_pipeline_file_gives_its_pipeline_function(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "def helper(x):\n    return x + 1\n\ndef pipeline(ctx):\n    return helper(1)\n"
    )
    fn = load_pipeline(path)
    assert fn(None) == 2  # type: ignore[arg-type, func-returns-value]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", "must define a function pipeline"),
        ("pipeline = 3\n", "must define a function pipeline"),
        ("def pipeline(ctx)\n", "failed to load"),
        ("import not_a_module_anywhere\n", "failed to load"),
    ],
)
def test_files_that_cannot_run_are_named_with_the_reason(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_pipeline(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_pipeline(tmp_path / "nope.py")
