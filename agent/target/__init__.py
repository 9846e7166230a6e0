"""The target script as the harness reads it: its knobs (ALL_CAPS constants with a search
space, or program.md's `knobs:` over a Python, YAML or JSON file), finding and setting their
values, and the lines of it that the command's flags override. What a researcher edits and what
program.md and the night check, described once, below all of them."""
