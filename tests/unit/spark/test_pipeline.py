"""Loading pipeline files for `sparkiq run`: clear errors for files that cannot run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from sparkiq.core.errors import ConfigError
from sparkiq.spark.pipeline import PipelineContext, load_pipeline


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


class FakeQuery:
    """What `PipelineContext._start` reads of a started query."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.isActive = True
        self.lastProgress: dict[str, object] | None = None


def test_a_query_that_stops_ends_the_wait_for_the_next_ones_first_batch(
    tmp_path: Path,
) -> None:
    ctx = PipelineContext(
        spark=cast(Any, None),
        bootstrap_servers="127.0.0.1:9",
        checkpoint_dir=tmp_path,
        app="t",
        init_wait_s=30.0,
    )
    first, second = FakeQuery("first"), FakeQuery("second")
    first.lastProgress = {"batchId": 0}
    assert ctx._start(lambda: first) is first  # its first batch is done: no wait
    first.isActive = False  # then it fails, while the next one is in its first batch
    started = time.monotonic()
    assert ctx._start(lambda: second) is second
    assert time.monotonic() - started < 5  # not the 30 s a first batch may take
    assert ctx.queries == [first, second]  # for the runner's watch, which fails or restarts


def test_checkpoints_on_shared_storage_are_urls_under_the_root() -> None:
    ctx = PipelineContext(
        spark=cast(Any, None), bootstrap_servers="b", checkpoint_dir="hdfs://nn:8020/ckpt/"
    )
    assert ctx.checkpoint("table store-sales") == "hdfs://nn:8020/ckpt/table_store-sales"
    local = PipelineContext(spark=cast(Any, None), bootstrap_servers="b", checkpoint_dir=Path("c"))
    assert local.checkpoint("customers") == "c/customers"
