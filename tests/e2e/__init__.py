"""End-to-end tests: real node processes, Apache Kafka (and the dev broker for a compatibility
subset) and, for the pipeline, Spark."""
