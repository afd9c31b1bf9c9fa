"""The node's API: the app behind the seam (`nodeapp`), the gate every request passes
(`gate`), the dispatch of HTTP API v1 to reads and watches (`dispatch`), the pipeline's
endpoint, the cluster map a group leader serves its members (`mapexchange`), the server
that runs it all on the node's loop (`server`), and an ASGI adapter.

May import: everything of the HTTP layer; it is its top.
"""
