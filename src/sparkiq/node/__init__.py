"""A serving node without its HTTP API: the `Node`, its stores, restore, membership, settings.

`node.Node` ties the catalog, the stores (`store`: the registry of a state dir's stores;
`partitionstore`: one partition's RocksDB store), the restorer (`restore/`) and the group
membership (`membership`, `assignment`, `rebalance`: asking the group for a new assignment)
into one process; `metadata` describes its map for `/v1/metadata`; `settings` is its one
settings model. Nothing here imports the HTTP layer, Spark, the CLI or the dev tools (checked by
`lint-imports`); `sparkiq.cli.serving` joins a node to its HTTP server.
"""
