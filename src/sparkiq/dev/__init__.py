"""Local development: the dev broker, local clusters and pipelines, the demo and its example.

Child processes for the demo, the tests and the benchmarks (`processes`, `broker`,
`localcluster`, `localpipeline`), `demo` (`sparkiq demo`) and `pos/`, the point-of-sale
example the demo and the end-to-end tests run.
"""
