"""Storage faults made on purpose: a store's SST files overwritten in the middle."""

from __future__ import annotations

import random
from pathlib import Path


def sst_files(store_dir: Path) -> list[Path]:
    """The SST files of one RocksDB directory, largest first."""
    return sorted(store_dir.glob("*.sst"), key=lambda p: p.stat().st_size, reverse=True)


def corrupt_ssts(store_dir: Path, *, files: int = 3, size: int = 4096, seed: int = 1) -> int:
    """Overwrite `size` bytes in the middle of up to `files` SST files with random bytes (as a
    disk gone bad would); the number of files changed. The store must be closed."""
    rng = random.Random(seed)
    changed = 0
    for path in sst_files(store_dir)[:files]:
        length = path.stat().st_size
        if length < 3 * size:
            continue
        with path.open("r+b") as f:
            f.seek(length // 2 - size // 2)
            f.write(rng.randbytes(size))
        changed += 1
    return changed
