"""Early stopping: real curves collected, replayed, and simulated nights of curves."""
