"""How a run ended, decided the same way by every backend.

Two parts, both backend-neutral:

- `CappedLog` keeps a run's output on disk within a byte cap (head + rolling tail) and
  feeds complete lines to a progress callback;
- `classify` turns the facts a backend observed (exit code, timeout, OOM, interrupt) plus
  what the script left behind (`result.json`, the log's `key: value` summary, lines the
  program's `metric_pattern` matches) into exactly one `Status`, the metric, the metrics
  dict and a one-line reason; `run_result` makes that the backend's `RunResult`.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import stat
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import Any, Callable

from sandbox.protocol import RunResult, RunSpec, Status

RESULT_FILE = "result.json"
MAX_RESULT_BYTES = 1_000_000   # a bigger result.json is treated as garbage (hostile or a bug)
MAX_PENDING_LINE = 64 * 1024   # a "line" longer than this is passed on in pieces
TAIL_SCAN_BYTES = 256 * 1024   # how far back tail() looks for the last lines

# Log evidence that the process died for memory, matched only when it exited non-zero.
_OOM_EVIDENCE = (
    "MemoryError",
    "CUDA out of memory",
    "OutOfMemoryError",
    "can't allocate memory",     # torch's DefaultCPUAllocator
    "std::bad_alloc",
    "Cannot allocate memory",    # ENOMEM from the OS
)
_SUMMARY_LINE = re.compile(r"^\s*([A-Za-z_][\w.\-/]*)\s*:\s+(\S.*?)\s*$")
_ERROR_LINE = re.compile(r"^\s*(\w+(\.\w+)*(Error|Exception|Interrupt|Exit)\b.*|.*\berror\b.*)$",
                         re.IGNORECASE)


def utc_now() -> str:
    """The current time, ISO 8601 in UTC with milliseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class CappedLog:
    """A run log on disk that never exceeds about `cap_bytes`, nor holds more in memory.

    The first `cap_bytes // 2` bytes go straight to the file; after that only a rolling tail
    of the last `cap_bytes // 2` bytes is kept in memory and written on `close()`, after a
    marker line `[... N bytes elided ...]`. So the file always shows how the run started and
    how it ended. `on_output` receives each complete line, decoded with errors="replace"
    (invalid UTF-8 never raises); an exception in the callback disables it, never the run.
    """

    def __init__(self, path: Path, cap_bytes: int, on_output: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._head_cap = max(cap_bytes // 2, 1)
        self._tail_cap = max(cap_bytes - self._head_cap, 1)
        self._head_written = 0
        self._tail = bytearray()       # bytes past the head, last `_tail_cap` of them
        self._total = 0
        self._pending = bytearray()    # partial line waiting for its newline
        self._on_output = on_output
        self.callback_error: BaseException | None = None
        self.closed = False

    @property
    def total_bytes(self) -> int:
        """Bytes the run wrote, including any elided."""
        return self._total

    @property
    def elided_bytes(self) -> int:
        return max(self._total - self._head_written - len(self._tail), 0)

    def write(self, data: bytes) -> None:
        if self.closed or not data:
            return
        self._total += len(data)
        if self._on_output is not None:
            self._split_lines(data)
        room = self._head_cap - self._head_written
        if room > 0:
            self._file.write(data[:room])
            self._file.flush()   # on disk as the run goes: the live page reads its progress
            self._head_written += min(room, len(data))
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - self._tail_cap
            if excess > 0:
                del self._tail[:excess]   # bytearray drops a prefix without copying the rest

    def close(self) -> None:
        """Flush the pending partial line to the callback and write the tail. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._pending:
            self._emit(bytes(self._pending))
            self._pending.clear()
        if self.elided_bytes:
            self._file.write(f"\n[... {self.elided_bytes} bytes elided ...]\n".encode())
        self._file.write(self._tail)
        self._tail = bytearray()
        self._file.close()

    def tail(self, lines: int | None = 40) -> str:
        """The last `lines` lines of the output (None: every line of the last
        TAIL_SCAN_BYTES, what log patterns are searched in), decoded with errors="replace"."""
        if self.closed:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(size - TAIL_SCAN_BYTES, 0))
                data = fh.read()
        elif self._tail:
            data = bytes(self._tail[-TAIL_SCAN_BYTES:])
        else:
            self._file.flush()
            with open(self.path, "rb") as fh:
                fh.seek(max(self._head_written - TAIL_SCAN_BYTES, 0))
                data = fh.read(TAIL_SCAN_BYTES)
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:] if lines is not None else text.splitlines())

    # -- line splitting for the progress callback --------------------------------------

    def _split_lines(self, data: bytes) -> None:
        """Each line to the callback as it ends; also each `\r` update of a line (a tqdm bar
        redraws itself with `\r` and writes no newline until it closes), once the byte after
        the `\r` shows it is not a `\r\n` line end."""
        self._pending += data
        start = 0
        while True:
            end = _line_end(self._pending, start)
            if end < 0:
                break
            self._emit(bytes(self._pending[start:end]))
            start = end + 1
        del self._pending[:start]
        while len(self._pending) > MAX_PENDING_LINE:  # no newline for a long while
            self._emit(bytes(self._pending[:MAX_PENDING_LINE]))
            del self._pending[:MAX_PENDING_LINE]

    def _emit(self, raw: bytes) -> None:
        if self._on_output is None:
            return
        try:
            self._on_output(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except Exception as exc:  # a broken progress display must not lose the run
            self.callback_error = exc
            self._on_output = None


def _line_end(buffer: bytearray, start: int) -> int:
    """Where the next line or `\r` update in `buffer` from `start` ends (-1: not yet)."""
    newline = buffer.find(b"\n", start)
    ret = buffer.find(b"\r", start, newline if newline >= 0 else len(buffer))
    if ret >= 0 and ret + 1 < len(buffer) and buffer[ret + 1] != ord("\n"):
        return ret
    return newline


# -- classification ------------------------------------------------------------------------

def classify(*, exit_code: int | None, timed_out: bool, oom_killed: bool, interrupted: bool,
             out_dir: Path, log_tail: str, metric: str, metric_pattern: str | None = None,
             metrics_pattern: str | None = None, log_text: str | None = None,
             result_file: str = RESULT_FILE, metric_required: bool = True,
             repository: Path | None = None,
             ) -> tuple[Status, float | None, dict[str, Any], str]:
    """Decide how a run ended: (status, metric value or None, metrics, one-line reason).

    `exit_code` follows subprocess's convention (negative = killed by that signal); shell
    style codes above 128 are read as signals too. Order of precedence: INTERRUPTED,
    TIMEOUT, OOM (`oom_killed`, or memory errors in the log of a failed run), CRASH
    (non-zero exit), then the metric: from `out_dir/result_file` (a JSON object, default
    result.json) merged
    over the `key: value` lines after the last `---` in the log, merged over what the
    patterns found in `log_text` (default: `log_tail`): result.json wins, then the summary,
    then the last match of `metric_pattern` (its one group is the metric) and of
    `metrics_pattern` (each named group a figure). With `metric_required` False (a training
    step an evaluator scores) an exit 0 is OK whatever it reported. A crash's reason names the
    last traceback frame in `repository` (the run's snapshot), not a library's. Missing -> NO_METRIC (the reason names
    every way to report it and the lines that nearly matched), not a finite number ->
    BAD_METRIC, else OK. The metrics dict is returned for every status, so a crash still
    shows what the script managed to report.
    """
    text = log_tail if log_text is None else log_text
    found = pattern_metrics(text, metric, metric_pattern, metrics_pattern)
    metrics, source_note = collect_metrics(Path(out_dir), log_tail, result_file)
    metrics = {**found, **metrics}
    if interrupted:
        return Status.INTERRUPTED, None, metrics, "the harness was interrupted while this ran"
    if timed_out:
        return Status.TIMEOUT, None, metrics, "still running past budget + grace; the process tree was killed"
    failed = exit_code is None or exit_code != 0
    if oom_killed:
        return Status.OOM, None, metrics, "killed for memory (the memory limit was hit)"
    if failed:
        where = user_frame(text, repository)
        error = last_error_line(log_tail) + (f" ({where})" if where else "")
        evidence = next((e for e in _OOM_EVIDENCE if e in log_tail), None)
        if evidence:
            return Status.OOM, None, metrics, f"{describe_exit(exit_code)}, out of memory: {error}"
        return Status.CRASH, None, metrics, f"{describe_exit(exit_code)}: {error}"
    if not metric_required:
        return Status.OK, None, metrics, ""
    if metric not in metrics:
        has_result = os.path.lexists(Path(out_dir) / result_file)
        note = source_note or (f"{result_file} has no {metric!r}" if has_result else f"no {result_file}")
        return Status.NO_METRIC, None, metrics, no_metric_reason(metric, note, metric_pattern, text,
                                                                 result_file)
    value = _as_float(metrics[metric])
    if value is None or not math.isfinite(value):
        return Status.BAD_METRIC, None, metrics, f"{metric} is {metrics[metric]!r}, not a finite number"
    return Status.OK, value, metrics, ""


def pattern_metrics(text: str, metric: str, metric_pattern: str | None,
                    metrics_pattern: str | None) -> dict[str, Any]:
    """Figures from the log: each named group of `metrics_pattern` and the one group of
    `metric_pattern` (as `metric`), from their last match; numbers become numbers."""
    found: dict[str, Any] = {}
    if metrics_pattern:
        for match in re.finditer(metrics_pattern, text, re.MULTILINE):
            found.update({name: _number_or_text(value.strip())
                          for name, value in match.groupdict().items() if value is not None})
    if metric_pattern:
        last = None
        for last in re.finditer(metric_pattern, text, re.MULTILINE):
            pass
        if last is not None and last.group(1) is not None:
            found[metric] = _number_or_text(last.group(1).strip())
    return found


def no_metric_reason(metric: str, result_note: str, metric_pattern: str | None, text: str,
                     result_file: str = RESULT_FILE) -> str:
    """Why no metric was found, naming every way to report one and the lines that nearly
    matched (those sharing the most words with the metric's name and the pattern)."""
    pattern = (f"metric_pattern {metric_pattern!r} matched no line" if metric_pattern
               else "no metric_pattern in program.md")
    words = {w.lower() for w in re.findall(r"[A-Za-z]{3,}", f"{metric} {metric.replace('_', ' ')} "
                                                             f"{metric_pattern or ''}")}
    scored = [(sum(w in line.lower() for w in words), line.strip())
              for line in text.splitlines() if line.strip()]
    best = max((score for score, _ in scored), default=0)
    near = [_shorten(line, 120) for score, line in scored if best and score == best][-3:]
    nearly = f"; lines that nearly matched: {' | '.join(near)}" if near else ""
    suggested = suggest_pattern(metric, metric_pattern, [line for score, line in scored if best and score == best],
                                text)
    if suggested:
        nearly += f"; this would capture it: metric_pattern: '{suggested}'"
    return (f"exited 0 but reported no {metric!r} ({result_note} in $NIGHTSHIFT_OUT, no "
            f"`{metric}: <value>` line after a `---` line in the log, {pattern}){nearly}. Report it one of "
            f"three ways: write {{\"{metric}\": ...}} to $NIGHTSHIFT_OUT/{result_file}, print a "
            f"`---` line then `{metric}: <value>`, or set metric_pattern in program.md to a "
            f"regular expression whose one group captures the value")


_NUMBER_TEXT = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_REGEX_SPECIALS = set(".^$*+?{}[]\\|()")


def suggest_pattern(metric: str, metric_pattern: str | None, near: list[str], text: str = "") -> str | None:
    """A `metric_pattern` that captures the metric from a near-miss line naming it (the words
    of `metric`, test_loss: "test loss", "test_loss", or those before the given pattern's
    group) followed by a number, e.g. `test loss: ([0-9.]+)` from
    "step 500 train loss: 2.31 test loss: 2.35"; only one that matches its line and captures
    the number there. Of the lines' suggestions, the one matching most lines of `text` wins
    (the script's regular report, not a one-off "test loss 2.1 is the best so far"), then
    the earliest (such a note follows the report it repeats)."""
    for words in _name_words(metric, metric_pattern):
        named = re.compile(r"[\W_]*".join(map(re.escape, words)) + rf"\W*?(?=({_NUMBER_TEXT})(?!\w))",
                           re.IGNORECASE)
        found = list(dict.fromkeys(filter(None, (_captures(named, line) for line in near))))
        if found:
            return max(found[:5], key=lambda pattern: len(re.findall(pattern, text)))
    return None


def _captures(named: re.Pattern[str], line: str) -> str | None:
    """The pattern capturing the number after the last of `named` in `line`, or None."""
    hits = list(named.finditer(line))
    if not hits:
        return None
    last = hits[-1]
    number = last.group(1)
    group = "([0-9.]+)" if re.fullmatch(r"[0-9.]+", number) else "([-+0-9.eE]+)"
    start = last.start() if len(hits) == 1 else _word_before(line, last.start())
    suggested = _literal(line[start:last.end()]) + group
    check = list(re.finditer(suggested, line))
    return suggested if check and check[-1].group(1) == number and "'" not in suggested else None


def _name_words(metric: str, metric_pattern: str | None) -> list[list[str]]:
    """The word sequences a line might name the metric by: the metric's, then the words just
    before the pattern's group (the text its author saw)."""
    found = [re.findall(r"[A-Za-z]+|\d+", metric)]
    if metric_pattern and "(" in metric_pattern:
        before = re.split(r"[^A-Za-z ]", metric_pattern[:metric_pattern.index("(")])[-1]
        if before.split():
            found.append(before.split())
    return [words for words in found if words]


def _word_before(line: str, start: int) -> int:
    """Where the word before `start` begins: context for a name the line repeats (the test
    loss of "train loss: 2.31 test loss: 2.35")."""
    match = re.search(r"(\w+)\W*$", line[:start])
    return match.start(1) if match else start


def _literal(text: str) -> str:
    """`text` as a regex matching it, spaces kept readable."""
    return "".join("\\" + c if c in _REGEX_SPECIALS else c for c in text)


def describe_exit(exit_code: int | None) -> str:
    """'exit code 1', 'killed by signal 9 (SIGKILL)', or 'no exit code'."""
    if exit_code is None:
        return "no exit code"
    signum = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code <= 128 + 64 else 0
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"killed by signal {signum} ({name})" if exit_code < 0 else f"exit code {exit_code} ({name}?)"
    return f"exit code {exit_code}"


def last_error_line(log_tail: str) -> str:
    """The last line that looks like an error (else the last non-empty line), shortened."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    if not lines:
        return "no output"
    line = next((l for l in reversed(lines) if _ERROR_LINE.match(l)), lines[-1])
    return _shorten(line, 240)


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.MULTILINE)
# Where libraries live: an installed package, the standard library, code that is no file.
_LIBRARY = re.compile(r"^<|[/\\](site|dist)-packages[/\\]|[/\\]lib[/\\]python\d+(\.\d+)?t?[/\\]")


def user_frame(text: str, repository: Path | None = None) -> str | None:
    """Where the last traceback in `text` left the user's code: its last frame outside the
    libraries, e.g. `makemore.py line 77, in forward`, so a crash deep in torch still names
    the script's line. With `repository` (the run's snapshot), a frame counts only when its
    file is one of the repository's, named by its path there (`train/train.py`), whatever
    folder the backend ran it from; without, by its file name."""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    for path, line, function in reversed(_FRAME.findall(text, start)):
        if _LIBRARY.search(path):
            continue
        shown = _repository_path(path, repository) if repository is not None else PurePath(path).name
        if shown:
            return f"{shown} line {line}, in {function}"
    return None


def _repository_path(path: str, repository: Path) -> str | None:
    """`path` (as the run saw it: a copy, an overlay, a container's folder) as a path inside
    `repository`: its longest ending that names a file there, or None."""
    parts = [part for part in PurePath(path).parts if part not in ("/", "\\")]
    if ".." in parts:
        return None
    for first in range(len(parts)):
        candidate = PurePath(*parts[first:])
        if (repository / candidate).is_file():
            return candidate.as_posix()
    return None


def _shorten(line: str, limit: int) -> str:
    """`line` within `limit` characters, cut in the middle: the start says what failed and
    the end names the file or value, so neither is lost."""
    if len(line) <= limit:
        return line
    head = limit * 2 // 3
    return f"{line[:head]} … {line[-(limit - head - 3):]}"


def collect_metrics(out_dir: Path, log_tail: str, result_file: str = RESULT_FILE
                    ) -> tuple[dict[str, Any], str]:
    """Metrics from result.json (or `result_file`) merged over the log summary, and a note on
    any problem."""
    summary = parse_summary(log_tail)
    reported, note = read_result_json(out_dir / result_file)
    return {**summary, **(reported or {})}, note


def read_result_json(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The JSON object in `path`, or (None, why not). Never blocks or follows links:
    the file was written by untrusted code and could be a FIFO, a link to /dev/zero, huge."""
    name = Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, f"no {name}"
    except OSError as exc:
        return None, f"{name} unreadable ({exc.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"{name} is not a regular file"
        if info.st_size > MAX_RESULT_BYTES:
            return None, f"{name} is {info.st_size} bytes, over {MAX_RESULT_BYTES}"
        raw = os.read(fd, MAX_RESULT_BYTES + 1)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError as exc:
        return None, f"{name} is not valid JSON ({exc})"
    if not isinstance(data, dict):
        return None, f"{name} holds a {type(data).__name__}, not a JSON object"
    return data, ""


def parse_summary(log_tail: str) -> dict[str, Any]:
    """`key: value` lines after the last line of just `---`; numeric values become numbers.

    Without a `---` line the whole text is read but only numeric values are kept, so a
    traceback's `ValueError: boom` is not taken for a metric. A later line wins."""
    lines = log_tail.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() == "---"]
    found: dict[str, Any] = {}
    for line in lines[marks[-1] + 1 if marks else 0:]:
        match = _SUMMARY_LINE.match(line)
        if match:
            value = _number_or_text(match.group(2))
            if marks or not isinstance(value, str):
                found[match.group(1)] = value
    return found


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)   # accepts "nan" and "inf": BAD_METRIC decides on those
    except ValueError:
        return text


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def run_result(spec: RunSpec, log: CappedLog, *, exit_code: int | None, timed_out: bool, oom_killed: bool,
               interrupted: bool, duration_s: float, peak_memory_mb: float | None, backend: str,
               started_at: str, sandbox: dict[str, Any], written: dict[str, int | None],
               work_dir: Path | None, hidden_read: list[str], hidden_enforced: str) -> RunResult:
    """How a finished (or killed) run ended, as every backend reports it: the status and metric
    from `classify` over its out folder and log, the figures the backend measured."""
    tail = log.tail(40)
    status, metric, metrics, reason = classify(
        exit_code=exit_code, timed_out=timed_out, oom_killed=oom_killed, interrupted=interrupted,
        out_dir=spec.out_dir, log_tail=tail, metric=spec.metric, metric_pattern=spec.metric_pattern,
        metrics_pattern=spec.metrics_pattern, result_file=spec.result_file,
        metric_required=spec.metric_required, log_text=log.tail(None), repository=spec.snapshot_dir)
    return RunResult(status=status, exit_code=exit_code, metric=metric, metrics=metrics,
                     duration_s=round(duration_s, 3), peak_memory_mb=peak_memory_mb, log_path=log.path,
                     log_tail=tail, backend=backend, started_at=started_at, ended_at=utc_now(),
                     reason=reason, sandbox={**sandbox, "log_bytes": log.total_bytes,
                                             "log_elided_bytes": log.elided_bytes},
                     written=written, work_dir=work_dir, hidden_read=hidden_read, hidden_enforced=hidden_enforced)
