"""The tests: `unit/` mirrors `src/sparkiq` (one `test_<module>.py` per module), `e2e/` runs
real processes (every test there is marked `e2e`), `support/` holds what both share and
`conftest.py` the session's dev broker. Every directory is a package, so test modules are
imported by their dotted path (`tests.unit.node.test_settings`) and may share basenames.
"""
