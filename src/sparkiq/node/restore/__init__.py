"""Restores changelog partitions into their stores, follows them, and reports state and lag.

- `restorer`: the `Restorer` (assignment, the restorer thread, applying consumed batches);
- `healing`: stores whose files failed them, rebuilt from the changelog or reopened;
- `replica`: one assigned partition's bookkeeping, `ReplicaState` and `PartitionStatus`;
- `batches`: the per-record loop that turns a consumed batch into store write batches;
- `fetch`: the consumer's settings and where it stands in each partition;
- `ends`: true end offsets read off the restorer thread.
"""

from sparkiq.node.restore.batches import StoreKeyFn, store_key_fn
from sparkiq.node.restore.fetch import BATCH_SIZE, CONSUMER_CONF
from sparkiq.node.restore.replica import PartitionStatus, ReplicaState
from sparkiq.node.restore.restorer import Restorer

__all__ = [
    "BATCH_SIZE",
    "CONSUMER_CONF",
    "PartitionStatus",
    "ReplicaState",
    "Restorer",
    "StoreKeyFn",
    "store_key_fn",
]
