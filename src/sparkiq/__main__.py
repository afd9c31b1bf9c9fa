"""`python -m sparkiq` runs the command line."""

from sparkiq.cli.main import main

main()
