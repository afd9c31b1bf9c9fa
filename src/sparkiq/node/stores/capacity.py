"""How many stores a node can hold open within its share of the open-file limit, and what it
says when its tables or its assignment need more (`StoreCapacity`).

The split of the limit between connections and stores is `sparkiq.core.openfiles.FileBudget`;
a store holds up to `FILES_PER_STORE` descriptors (`sparkiq.node.stores.storeoptions`).
"""

from __future__ import annotations

import logging

from sparkiq.core.openfiles import FileBudget
from sparkiq.node.stores.storeoptions import FILES_PER_STORE

log = logging.getLogger("sparkiq.node.node")


class StoreCapacity:
    """The stores a node's file budget has room for; logs when more are wanted."""

    def __init__(self, url: str, budget: FileBudget) -> None:
        self.url = url
        self.budget = budget
        self.stores = budget.stores(FILES_PER_STORE)
        self._most_given = 0  # the largest assignment past the capacity, logged once each

    def limit_to_hold(self, stores: int) -> int:
        """The open-file limit that leaves room for `stores` beside the connections."""
        return self.budget.limit + max(stores - self.stores, 0) * FILES_PER_STORE

    def check_tables(self, partitions: int) -> bool:
        """At start: log the budget, and warn if the tables' `partitions` would not all fit
        (a node may hold them all, e.g. the first of a group). Whether they fit."""
        budget = self.budget
        log.info(
            "node %s: open-file limit %d: %d for connections (--max-connections), room for "
            "%d stores of up to %d files each; the tables have %d partitions",
            self.url,
            budget.limit,
            budget.connections,
            self.stores,
            FILES_PER_STORE,
            partitions,
        )
        if partitions <= self.stores:
            return True
        log.warning(
            "node %s cannot hold a store for every partition of its tables: its open-file "
            "limit (%d) leaves room for %d stores beside %d connections, and the tables have "
            "%d partitions (a node may hold them all, e.g. the first of a group); raise the "
            "limit (ulimit -n, LimitNOFILE=) to at least %d or lower --max-connections",
            self.url,
            budget.limit,
            self.stores,
            budget.connections,
            partitions,
            self.limit_to_hold(partitions),
        )
        return False

    def check_assignment(self, stores: int) -> bool:
        """On each assignment: log an error the first time it gives more `stores` than fit
        (and again when a later one gives still more). Whether they fit."""
        if stores <= self.stores:
            return True
        if stores > self._most_given:
            self._most_given = stores
            log.error(
                "node %s is given %d stores, more than the %d its open-file limit leaves room "
                "for beside its connections: stores or connections may fail to open files; "
                "raise the limit (ulimit -n, LimitNOFILE=) to at least %d, lower "
                "--max-connections or add nodes",
                self.url,
                stores,
                self.stores,
                self.limit_to_hold(stores),
            )
        return False
