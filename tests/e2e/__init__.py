"""End-to-end tests: real node processes, the dev broker and, for the pipeline, Spark."""
