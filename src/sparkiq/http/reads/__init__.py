"""Every read a node answers: the one read loop and finding the replica that answers a
partition, key reads (the key path), multi-get, range and window pages across partitions,
lookups outside a key's own partition, and read-your-writes after a source position.

May import: `sparkiq.http.messages`, `sparkiq.http.forwarder`, `sparkiq.http.nodeview`,
`sparkiq.http.metrics`, `sparkiq.http.deferred`, `sparkiq.http.settings`; nothing of the
server, the app, forwarding's connections, watches or the console.
"""
