"""librdkafka's log lines as DEBUG records of the logger `sparkiq.librdkafka`.

librdkafka writes its own lines (`%3|...|FAIL|rdkafka#producer-1| ... Connection refused`)
straight to stderr, one per failed connection attempt, unless the client is given a
`logger`. Every Kafka client sparkiq makes takes `**LOG_CONF`: its lines then reach Python's
logging at DEBUG (the librdkafka severity kept in the text), so a terminal sees them only
with `--log-level debug`. The errors a command reports come from its error callback and its
own message, not from these lines.

confluent-kafka serves queued log lines from `poll()`, `consume()` and `flush()`; a client
that is never polled keeps them until it is closed.
"""

from __future__ import annotations

import logging
from typing import Any, Final

_LOG = logging.getLogger("sparkiq.librdkafka")

# Python's level for each syslog severity librdkafka uses (0 emergency ... 7 debug).
_SEVERITY: Final = {
    logging.CRITICAL: "CRITICAL",
    logging.ERROR: "ERROR",
    logging.WARNING: "WARNING",
    logging.INFO: "INFO",
    logging.DEBUG: "DEBUG",
}


class LibrdkafkaLog:
    """A `logger` for confluent-kafka clients: every line at DEBUG, its severity in the text.

    Picklable (it holds no state), so a configuration carrying it can travel to Spark's
    Python workers.
    """

    def log(self, level: int, msg: str, *args: Any) -> None:
        if _LOG.isEnabledFor(logging.DEBUG):
            text = msg % args if args else msg
            _LOG.debug("%s %s", _SEVERITY.get(level, str(level)), text)


# Add to a confluent-kafka client's configuration: `Producer({..., **LOG_CONF})`.
LOG_CONF: Final[dict[str, Any]] = {"logger": LibrdkafkaLog()}
