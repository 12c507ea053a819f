"""A worked example: payment capture with leasectl (README.md in this directory)."""
