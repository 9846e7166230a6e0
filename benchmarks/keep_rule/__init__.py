"""The keep rule: simulated nights (decisions, pairing, workers) and real ones."""
