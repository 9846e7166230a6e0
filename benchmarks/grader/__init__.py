"""The grader: its cost per run and its false flags on honest changes."""
