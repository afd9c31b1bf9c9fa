"""sparkiq: the state of PySpark streaming pipelines, queryable by key from any node."""

__version__ = "0.1.0"
