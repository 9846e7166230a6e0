"""The candidate's model in a process of its own. Protected, like evaluate.py, which starts it.

The evaluator holds the split it scores, its targets and the score; a graph runs operators the
candidate chose, on arguments the candidate chose. So the graph never runs in that process:
evaluate.py forks this one (after torch is imported, before the artifact or any data is read:
no second import of torch, nothing of the split in its memory). Here the artifact is read,
validated and bound under the guard (artifact.py, graph.py, guard.py), and then calls are
answered: the scorer sends windows of bytes (B, T) and receives logits (B, T, 256) as float32,
raw bytes through a pair of pipes. It never sends a target byte.

What that buys:
- a kernel that crashes (a SIGSEGV), a graph that hangs past the evaluation's deadline or runs
  out of memory ends this process, not the scorer, which records a failed probe (the run is
  bad_artifact), never a number;
- memory a kernel reads out of bounds is this process's own: its weights and the windows of
  the call, never the split or the targets;
- nothing the graph does reaches the scorer's state.
And no state survives from one call to the next here: the listed operators are pure functions
of their arguments (no randomness, no side effect, no write to what the graph is given:
tests/train/test_operators.py), the given tensors are compared with their copy after every
call (graph.Pristine), and each call's windows arrive in storage of their own.

A process whose OpenMP threads have run cannot fork a child that uses them (the child hangs in
its first parallel region: measured on torch 2.13's CPU build), so a child forked by a warm
process computes on one thread; evaluate.py's main() forks first thing, cold, and gives it
every core.
"""
from __future__ import annotations

import json
import os
import select
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from schema import Rejected

VOCAB = 256
FRAME = struct.Struct("<II")     # a message: its JSON header's length and its payload's length
PIPE_BYTES = 1 << 20             # a pipe holds 1 MiB (Linux's default most): a batch's logits in two writes


class GuardRefusal(Rejected):
    """The guard refused something the artifact's read or the model tried (the probe "guard")."""


@dataclass(frozen=True)
class Loaded:
    """What the scorer learns of a bound model: the shape of the windows it takes."""

    batch: int | None            # the one batch size it was exported for, or None for any
    context_len: int
    max_batch: int | None        # where the batch is free: the bound the export declared
    device: str                  # where its weights are ("cpu", "cuda"): the batch size tuned for it


class ModelProcess:
    """`ModelProcess.fork()`, then `load(path)` once, then `process(windows) -> logits` per
    call, then `close()`. Every failure of the model process is raised as Rejected (or
    GuardRefusal), with what happened."""

    def __init__(self, pid: int, requests: int, replies: int, deadline: float | None) -> None:
        self.pid, self.requests, self.replies, self.deadline = pid, requests, replies, deadline
        self.loaded: Loaded | None = None
        self.ended: str | None = None   # how the process ended, once it did

    @classmethod
    def fork(cls, threads: int = 1, deadline: float | None = None) -> "ModelProcess":
        """A model process waiting for its artifact. `threads`: its intra-op threads (more than
        one only from a process whose own have never run); `deadline`: time.monotonic() past
        which a call that has not been answered ends it (None: wait as long as it takes)."""
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        for fd in (requests_write, replies_write):
            _widen(fd)
        pid = os.fork()
        if pid == 0:   # the model process: it answers until the scorer closes its pipe
            os.close(requests_write)
            os.close(replies_read)
            code = 1
            try:
                _serve(requests_read, replies_write, threads)
                code = 0
            finally:
                os._exit(code)
        os.close(requests_read)
        os.close(replies_write)
        return cls(pid, requests_write, replies_read, deadline)

    def load(self, path: Path) -> Loaded:
        header, _ = self._ask({"load": str(path)})
        self.loaded = Loaded(**header["loaded"])
        return self.loaded

    def __call__(self, windows: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) as float32 for int64 windows (B, T)."""
        windows = windows.to(torch.int64).contiguous()
        _, logits = self._ask({"call": list(windows.shape)}, windows, reply_shape=(*windows.shape, VOCAB))
        return logits

    def close(self) -> None:
        """End the model process (it leaves when its pipe closes; killed if it does not)."""
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.ended is None:
            self.ended = _reap(self.pid, wait_s=2.0)

    def __enter__(self) -> "ModelProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- one request and its reply

    def _ask(self, header: dict, payload: torch.Tensor | None = None,
             reply_shape: tuple[int, ...] | None = None) -> tuple[dict, torch.Tensor | None]:
        if self.ended is not None:
            raise Rejected(f"the model process has ended ({self.ended})")
        try:
            _send(self.requests, header, payload)
            reply = _receive(self.replies, self._wait, into=lambda size: _buffer(reply_shape, size))
        except _Gone:
            self.ended = _reap(self.pid, wait_s=2.0)
            raise Rejected(f"the model process ended: {self.ended}") from None
        except _Late:
            os.kill(self.pid, signal.SIGKILL)
            self.ended = _reap(self.pid, wait_s=2.0)
            raise Rejected("the model did not answer before the evaluation's deadline (a graph that "
                           "runs too long, or hangs)") from None
        header, logits = reply
        if "refused" in header:
            raise (GuardRefusal if header.get("guard") else Rejected)(header["refused"])
        return header, logits

    def _wait(self, fd: int) -> None:
        """Until `fd` can be read, or _Late past the deadline."""
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise _Late()


# ---------------------------------------------------------------- the model process's side

def _serve(requests: int, replies: int, threads: int) -> None:
    """Read the artifact (the first request), then answer calls until the pipe closes."""
    import artifact   # here, so that the scorer's side never imports what reads the artifact
    from guard import Guard

    torch.set_num_threads(threads)
    keep_freed_memory()   # before the guard, which refuses ctypes
    # Uninitialized memory comes back filled, not with an earlier call's bytes (the C switch:
    # torch.use_deterministic_algorithms would also import torch._inductor, 3.3 s).
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    block = lambda fd: None   # noqa: E731: the model process waits for the scorer as long as it takes
    try:
        header, _ = _receive(requests, block)
    except _Gone:
        return
    path = Path(header["load"])
    guard = Guard(readable=[path])
    try:
        with guard:
            model = artifact.read(path)
            shape = model.window_shape
            if shape is None:
                raise Rejected("the model must take one int64 tensor of byte windows (B, T); it takes "
                               f"{_describe_input(model)}")
            _send(replies, {"loaded": {"batch": shape[0], "context_len": shape[1], "max_batch": model.max_batch,
                                       "device": model.device.type}})
            while True:
                try:
                    header, windows = _receive(requests, block, into=lambda size: torch.empty(size // 8, dtype=torch.int64))
                except _Gone:
                    return
                try:
                    logits = _call(model, windows.view(header["call"]))
                except Exception as error:
                    _refuse(replies, error, guard)
                    continue
                if guard.refusals:
                    raise Rejected("")   # swallowed by library code: reported below
                _send(replies, {"logits": list(logits.shape)}, logits)
    except Exception as error:   # Rejected, what a hostile archive makes the read raise, or the guard's
        _refuse(replies, error, guard)
        while True:   # every later request is refused the same way, until the pipe closes
            try:
                _receive(requests, block, into=lambda size: torch.empty(size, dtype=torch.uint8))
            except _Gone:
                return
            _refuse(replies, error, guard)


@torch.no_grad()
def _call(model, windows: torch.Tensor) -> torch.Tensor:
    out = model(windows.to(model.device))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (*windows.shape, VOCAB):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise Rejected(f"the model returned {shape}, expected logits of shape (B, T, 256) = "
                       f"{(*windows.shape, VOCAB)}")
    return out.float().cpu().contiguous()


def _refuse(replies: int, error: BaseException, guard) -> None:
    if guard.refusals:
        detail = (f"loading or running the model tried to {guard.refusals[0]}: refused (an artifact is "
                  f"data; only tensor arithmetic runs here)")
    elif isinstance(error, Rejected):
        detail = str(error)
    else:
        detail = f"calling the model failed: {type(error).__name__}: {_short(error)}"
    _send(replies, {"refused": detail, "guard": bool(guard.refusals)})


def _describe_input(model) -> str:
    meta = model.input_meta
    sizes = [next(iter(size.values())) if "as_int" in size else "B" for size in meta["sizes"]]
    return f"a tensor of dtype {meta['dtype']} and shape {tuple(sizes)}"


def keep_freed_memory() -> None:
    """Keep the MBs a call's activations take in the heap between calls: glibc hands large
    blocks back to the OS on free and page-faults them in again on the next call (a call of the
    bundled model: 28 ms, 15 ms with the heap kept, measured on 2 cores; train.py does the
    same). M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB; nothing where libc is not glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)
        libc.mallopt(-1, 1 << 30)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------- framing

class _Gone(Exception):
    """The other side closed its pipe (or died)."""


class _Late(Exception):
    """The deadline passed while waiting."""


def _send(fd: int, header: dict, payload: torch.Tensor | None = None) -> None:
    text = json.dumps(header).encode()
    data = memoryview(payload.numpy()).cast("B") if payload is not None else memoryview(b"")
    try:
        _write_all(fd, FRAME.pack(len(text), len(data)) + text)
        _write_all(fd, data)
    except (BrokenPipeError, ConnectionResetError):
        raise _Gone() from None


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int, wait, into=None) -> tuple[dict, torch.Tensor | None]:
    """(header, payload) of the next message; the payload read straight into `into(size)`, a
    tensor of that many bytes."""
    sizes = _read_exactly(fd, memoryview(bytearray(FRAME.size)), wait)
    text_size, payload_size = FRAME.unpack(sizes)
    if text_size > 1 << 20:
        raise _Gone()   # not a message of ours
    header = json.loads(bytes(_read_exactly(fd, memoryview(bytearray(text_size)), wait)))
    if not payload_size:
        return header, None
    payload = into(payload_size) if into is not None else None
    if payload is None or payload.numel() * payload.element_size() != payload_size:
        raise _Gone()   # a payload where none was asked for, or not the size asked for
    _read_exactly(fd, memoryview(payload.numpy()).cast("B"), wait)
    return header, payload


def _read_exactly(fd: int, view: memoryview, wait) -> memoryview:
    got = 0
    while got < len(view):
        wait(fd)
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise _Gone()
        got += n
    return view


def _buffer(shape: tuple[int, ...] | None, size: int) -> torch.Tensor | None:
    """A fresh float32 tensor of `shape` for a reply's logits, if `size` bytes is what it holds."""
    if shape is None or size != 4 * _count(shape):
        return None
    return torch.empty(shape, dtype=torch.float32)


def _count(shape) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _widen(fd: int) -> None:
    try:
        import fcntl
        fcntl.fcntl(fd, 1031, PIPE_BYTES)   # F_SETPIPE_SZ: fewer round trips per batch
    except (ImportError, OSError, AttributeError):
        pass


def _reap(pid: int, wait_s: float) -> str:
    """How the process `pid` ended: waited for up to `wait_s`, then killed."""
    end = time.monotonic() + wait_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        why = {"SIGSEGV": "a kernel read or wrote memory it does not own", "SIGKILL": "killed (out of memory, "
               "or past its deadline)", "SIGBUS": "a kernel read memory it does not own",
               "SIGABRT": "a kernel aborted"}.get(name, "")
        return f"killed by signal {name}" + (f": {why}" if why else "")
    return f"exit code {os.WEXITSTATUS(status)}"


def _short(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + " ..."
