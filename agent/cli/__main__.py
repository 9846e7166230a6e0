"""`python -m agent.cli ...` runs the `nightshift` command line."""
import sys

try:
    from agent.cli.app import app
except KeyboardInterrupt:   # Ctrl-C while the command line loads: nothing has started yet
    sys.exit(130)

app()
