"""Asking other nodes: the keep-alive pool of node-to-node connections and its connections,
and another node's event stream relayed for a watch.

May import: `sparkiq.http.messages`, `sparkiq.http.forwarder`, `sparkiq.http.settings`,
`sparkiq.http.tls`; nothing of the server, the app, the reads, watches or the console.
"""
