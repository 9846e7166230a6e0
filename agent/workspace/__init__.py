"""The git side of a night: the branch and worktree of a tag, candidate commits, discarded refs,
read-only snapshots, and the gate a proposal must pass before it becomes a commit."""
