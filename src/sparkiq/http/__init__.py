"""The HTTP API of a serving node: routing, parsing, local reads, forwarding, errors, metrics."""
