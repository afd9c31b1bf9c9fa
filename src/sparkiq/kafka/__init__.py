"""Thin wrappers over the Kafka clients: admin calls and end offsets that can be trusted."""
