"""sparkiq's HTTP/1.1 server on the node's own loop: listening, connection limits, one
connection's framing and order, and the plain lane for one plain GET.

May import: the seam (`sparkiq.http.seam`), `sparkiq.http.messages`, `sparkiq.http.settings`;
nothing of the app, the reads, forwarding, watches or the console (it knows the app only
through the seam).
"""
