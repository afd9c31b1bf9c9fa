"""`python -m sparkiq` runs the command line."""

from sparkiq.cli import main

main()
