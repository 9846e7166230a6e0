"""`python -m agent.cli ...` runs the `nightshift` command line."""
import sys

try:
    from agent.cli.app import app
except KeyboardInterrupt:   # Ctrl-C while the command line loads: nothing has started yet
    print("interrupted while the command line loaded: nothing was started", file=sys.stderr)
    sys.exit(130)

app()
