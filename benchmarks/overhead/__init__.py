"""What the harness costs: sandbox, dispatch, the harness per experiment, the live page, workers' duty cycle."""
