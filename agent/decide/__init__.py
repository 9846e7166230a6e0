"""Keep rules: from measurements to keep / discard / inconclusive, noise estimates, FDR, prediction scores.

Pure functions of the evidence: nothing here reads files, git or the clock."""
