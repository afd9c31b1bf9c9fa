"""A serving node without its HTTP API: the `Node`, its stores, restore, membership, settings.

`node.Node` ties the catalog, the stores (`store`), the restorer (`restore/`) and the group
membership (`membership`, `assignment`) into one process; `settings` is its one settings
model. Nothing here imports the HTTP layer, Spark, the CLI or the dev tools (checked by
`lint-imports`); `sparkiq.cli.serving` joins a node to its HTTP server.
"""
