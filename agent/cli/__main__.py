"""`python -m agent.cli ...` runs the `nightshift` command line."""
from agent.cli.app import app

app()
