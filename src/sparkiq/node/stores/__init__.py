"""A node's local state: the state dir and its stores (`registry`), one RocksDB per table
partition (`partitionstore`) with its metadata (`storemeta`) and options (`storeoptions`).

May import: `sparkiq.core`; nothing of the group or restore.
"""
