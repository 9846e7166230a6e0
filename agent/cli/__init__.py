"""The `nightshift` command line."""
