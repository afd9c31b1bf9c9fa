"""Helpers shared by the unit and the end-to-end tests (imported as `tests.support.X`)."""
