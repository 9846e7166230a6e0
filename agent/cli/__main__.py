"""`nightshift ...` and `python -m agent.cli ...` run the command line from here."""
import sys


def main() -> None:
    try:
        from agent.cli.app import app
        from agent.cli.common import CTRL_C
        from agent.record.events import ExitCode
    except KeyboardInterrupt:   # Ctrl-C while the command line loads: nothing has started
        print("interrupted while the command line loaded: nothing was started", file=sys.stderr)
        sys.exit(130)
    try:
        app()
    except SystemExit as done:
        # typer turns a Ctrl-C that lands outside a command (while click parses the
        # arguments) into a silent exit 130; a command's own Ctrl-C said "interrupted"
        if done.code == ExitCode.INTERRUPTED and not CTRL_C.reported:
            print("\ninterrupted before the command started: nothing was started", file=sys.stderr)
        raise


if __name__ == "__main__":
    main()
