"""Example Spark jobs on Floe's tiered data, runnable locally and as EMR Serverless entry points."""
