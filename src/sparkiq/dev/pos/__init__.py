"""The retail point-of-sale example: invoice generator, Spark pipeline and its oracle."""
