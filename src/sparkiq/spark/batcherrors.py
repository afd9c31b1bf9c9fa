"""A ``foreachBatch`` function's failure as Spark is told it: the Java error without its frames.

Spark 4.2 tells a query that `query.stop()` cut off from one that failed by matching the
text of its error (``StreamExecution.isInterruptionException``) against the pattern::

    py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(
    java.lang.InterruptedException|java.io.InterruptedIOException|...)

A ``foreachBatch`` function whose Spark job the stop interrupts raises a `Py4JJavaError`
whose text carries the JVM's whole stack trace (8 KB), and Java's regex engine recurses
once per character that ``(.|...)*`` takes: past 1-2 KB the query's stream execution thread
dies of a ``java.lang.StackOverflowError`` ("Exception in thread "stream execution thread
for tables ..."" in the pipeline's log) instead of stopping, and a query that truly failed
that way loses its error. `BatchJavaError` carries the same error without the frames: the
call, and the headline (class and message) of the exception and of each of its causes,
which is all that Spark's check and the runner's (`sparkiq.spark.runner.restart_reason`)
read.
"""

from __future__ import annotations

import re

from sparkiq.core.errors import SparkiqError

# At most this much of an error's headlines: Spark's pattern recurses over all that follows
# "while calling" (on this JVM, matched on a py4j thread: 1 KB passed, 2 KB overflowed).
MAX_CHARS = 600
_FRAME = re.compile(r"\s+(at |\.\.\. \d+ more)")


class BatchJavaError(SparkiqError):
    """A micro-batch's ``foreachBatch`` function failed on a Java error (its headlines)."""


def without_frames(error: BaseException) -> BatchJavaError:
    """*error* (a `Py4JJavaError`) as `BatchJavaError`: its type and text as its traceback
    would show them, less the Java stack frames, at most `MAX_CHARS` of it."""
    kept = [line for line in str(error).splitlines() if line.strip() and not _FRAME.match(line)]
    text = "\n".join(kept)
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + " [...]"
    return BatchJavaError(f"{type(error).__module__}.{type(error).__qualname__}: {text}")
