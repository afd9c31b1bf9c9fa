"""Tests of one module (or package) each, laid out as `src/sparkiq` is."""
