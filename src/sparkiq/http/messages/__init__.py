"""What requests and answers of HTTP API v1 are: parameters, answers and their statuses, error
codes, the request id, the node-to-node wire format, the typed models and the OpenAPI
document.

May import: `sparkiq.core`, `sparkiq.auth`, `sparkiq.http.settings`; nothing else of the HTTP
layer.
"""
