"""The core: tables, keys and values, partitioners, queries, the cluster map, errors.

Pure definitions and algorithms with no I/O; every other layer builds on them and this
package imports none of them (checked by `lint-imports`, contracts in pyproject.toml).
"""
