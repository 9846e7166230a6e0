"""Where runs execute: worker slots on this machine, tasks on a Ray cluster, or Slurm jobs.

A `Workers` backend takes a `Job` (one sandboxed run: a `sandbox.RunSpec` and the protected
paths to check), runs it on a `Slot` (a worker: its GPU, or its share of the cores) and hands
back an `JobOutcome`. Like `sandbox/`, this package knows nothing of agents, git or ledgers: the
harness decides what to run, the workers only run it.
"""
