"""The simulation the keep-rule, early-stopping and researcher benchmarks share: the noise model fitted to real runs, simulated nights."""
