"""Watches: of one key and of a range of keys, from whichever replica can tell, relayed
through any node, as server-sent events.

May import: `sparkiq.http.reads`, `sparkiq.http.forwarding`, `sparkiq.http.messages` and the
modules at the HTTP layer's top; nothing of the server, the app or the console.
"""
