"""How a streaming query runs: micro-batches, or Spark's Real-Time Mode.

Defined here, below every layer, because the figures a pipeline publishes (`QueryBatch`) and
the nodes and the console that show them need the mode as much as the pipeline that chooses
it (`sparkiq.spark.realtime`).
"""

from __future__ import annotations

from enum import StrEnum


class TriggerMode(StrEnum):
    """How a query runs: micro-batches (Spark's default) or Real-Time Mode where it can."""

    MICROBATCH = "microbatch"
    REALTIME = "realtime"
