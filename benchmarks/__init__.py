"""Benchmarks: scripts that print figures, never assert. Run each as a module from the
repository root, e.g. `python -m benchmarks.keep_rule.decisions --pairing`. Grouped by what
they measure: keep_rule/, early_stop/, grader/, overhead/, researchers/, train/; sim/ holds
the simulation they share."""
