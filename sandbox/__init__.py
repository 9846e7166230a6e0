"""Running one experiment in a sandbox. See `protocol.Runner` for the contract."""
from sandbox.protocol import Limits, Runner, RunResult, RunSpec, SandboxUnavailable, Status, WorkdirMode

__all__ = ["Limits", "Runner", "RunResult", "RunSpec", "SandboxUnavailable", "Status", "WorkdirMode"]
