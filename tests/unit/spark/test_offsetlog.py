"""`offsetlog`: a micro-batch's record count from its query's offset log, or None."""

from __future__ import annotations

from pathlib import Path

from sparkiq.spark.offsetlog import batch_records, local_checkpoint_dir, read_offsets

_META = '{"batchWatermarkMs":0,"batchTimestampMs":1795828931930,"conf":{}}'


def _log(checkpoint: Path, batch_id: int, *sources: str) -> None:
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    (offsets / str(batch_id)).write_text("\n".join(["v1", _META, *sources]), encoding="utf-8")


def test_a_batch_holds_the_offsets_between_its_end_and_the_previous_one(tmp_path: Path) -> None:
    _log(tmp_path, 6, '{"pos": {"0": 100, "1": 50}}')
    _log(tmp_path, 7, '{"pos": {"0": 130, "1": 52, "2": 5}}')  # partition 2 is new
    assert batch_records(str(tmp_path), 7) == 30 + 2 + 5
    # Two sources of one query (a union): both count.
    _log(tmp_path, 8, '{"pos": {"0": 130}}', '{"returns": {"0": 4}}')
    _log(tmp_path, 9, '{"pos": {"0": 131}}', '{"returns": {"0": 14}}')
    assert batch_records(str(tmp_path), 9) == 11
    assert batch_records(f"file://{tmp_path}", 9) == 11


def test_an_unknown_size_is_none(tmp_path: Path) -> None:
    _log(tmp_path, 0, '{"pos": {"0": 100}}')
    assert batch_records(str(tmp_path), 0) is None  # the first batch has no log before it
    assert batch_records(str(tmp_path), 1) is None  # not written
    _log(tmp_path, 2, '{"pos": {"0": 100}}')
    assert batch_records(str(tmp_path), 2) is None  # batch 1's log is gone
    _log(tmp_path, 3, '{"logOffset": 7}')  # a file source's offsets
    assert batch_records(str(tmp_path), 3) is None
    _log(tmp_path, 4, "-")
    _log(tmp_path, 5, '{"pos": {"0": 9}}')
    assert batch_records(str(tmp_path), 5) == 9  # "-": the source had no offsets yet
    _log(tmp_path, 6, '{"pos": {"0": 9}}', '{"pos": {"0": 1}}')
    assert batch_records(str(tmp_path), 6) is None  # a source more than the batch before
    (tmp_path / "offsets" / "7").write_text("garbage", encoding="utf-8")
    assert read_offsets(tmp_path / "offsets" / "7") is None
    assert batch_records("hdfs://namenode/checkpoints/q", 5) is None


def test_only_this_machine_s_paths_are_read() -> None:
    assert local_checkpoint_dir("/var/sparkiq/cp") == Path("/var/sparkiq/cp")
    assert local_checkpoint_dir("file:///var/sparkiq/cp") == Path("/var/sparkiq/cp")
    assert local_checkpoint_dir("file:/var/sparkiq/cp") == Path("/var/sparkiq/cp")
    assert local_checkpoint_dir("s3a://bucket/cp") is None
    assert local_checkpoint_dir("file://otherhost/cp") is None
