"""Whether each knob is live: a value the researcher changes must change what the script does.

A knob can be dead and still look fine to every other check: karpathy/makemore's
`ModelConfig.n_embd` is a dataclass field default, but the script builds
`ModelConfig(..., n_embd=args.n_embd)`, so the argparse value always wins and a night of
proposals for that knob changes nothing. Two ways to find out, cheapest first:

- statically (`overwritten`, ast only, no run): a dataclass field knob that every
  construction of its class in the target passes explicitly (by keyword, or by position) is
  dead; the calls are named, and the flag the passed value comes from when it is
  `args.<name>` of an `add_argument` in the target;
- by a probe (`probe_knobs`): a short reference run of the unchanged target on one seed,
  then, per knob, a short run of the target with that knob moved to another value of its
  space (the far end of its range, or another choice), on the same seed, committed apart
  and run through the same executor and sandbox as check's baseline (never the user's
  files). What the two runs print is compared line by line over their common prefix, with
  timing numbers (`12.3ms`, `time 0.4`, `mfu 3%`, `eta`, ...), run folders and commit ids
  masked, and lines that merely echo the target's own text dropped (nanoGPT prints its
  config file: that the echo changed proves nothing). A probe stops as soon as a line
  differs, once it printed as many lines as the reference, or at the cap.

Identical output is a dead knob, a failure of check unless the user opts out (it would burn
a night's runs); a probe whose runs print nothing comparable (no line with a number in it)
before the cap is a warning, not a verdict. The why of a dead knob is said with a fix found
in the source (a call that passes the field, a local that shadows a constant).
"""
from __future__ import annotations

import ast
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

from agent.preflight.checks import Checklist
from agent.program import Program
from agent.record.events import Role, RunFinished
from agent.run.executor import RunExecutor
from agent.target.knobs import Knob, KnobError, find_knobs, format_value, same_value, set_knobs
from agent.workspace.repo import Workspace, WorkspaceError
from sandbox import Status

PROBE_CAP_S = 20.0        # a probe never runs longer than this (or the budget, when shorter)
REFERENCE_LINES = 30      # the reference stops once it printed this many comparable lines
OPT_OUT = "--allow-dead-knobs"

Say = Callable[[str], None]
Verdict = Literal["live", "dead", "unproven"]


# ---- records -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Overwrite:
    """A dataclass field knob whose default never reaches the script: every construction of
    its class in the target passes the field."""

    cls: str
    field: str
    calls: tuple[tuple[int, str], ...]   # (line of the `Class(` call, the value passed as text)
    flag: str | None = None              # the command-line flag that value comes from
    flag_line: int | None = None

    def reason(self) -> str:
        line, value = self.calls[0]
        more = "" if len(self.calls) == 1 else \
            f" (and so do the calls at line{'s' if len(self.calls) > 2 else ''} " \
            f"{', '.join(str(c[0]) for c in self.calls[1:])})"
        passed = f"{self.field}={value}" if value else f"{self.field} by position"
        return f"{self.cls}(...) at line {line} passes {passed}, which overwrites the default{more}"

    def fix(self) -> str:
        if self.flag:
            return (f"{self.reason()}: name the flag the script reads instead (`{self.flag}`, "
                    f"line {self.flag_line})")
        return (f"{self.reason()}: make the knob the value that call passes, or stop passing "
                f"{self.field} there so that the default is used")


@dataclass(frozen=True)
class KnobProbe:
    """What check found out about one knob."""

    knob: str
    verdict: Verdict
    old: Any
    new: Any
    evidence: str            # why: the line that differed, or what the runs showed
    fix: str = ""            # for a dead or unproven knob
    static: bool = False     # found from the source alone, no run
    seconds: float = 0.0     # the probe run's wall clock (0 when static)

    def says(self) -> str:
        change = f"{format_value(self.old)} -> {format_value(self.new)}"
        if self.verdict == "live":
            return f"{self.knob} ({change}): {self.evidence}"
        return f"{self.knob}: {self.evidence}"


@dataclass(frozen=True)
class ProbeReport:
    """Every knob's probe, the seed they ran on and the seconds they took (reference included)."""

    probes: tuple[KnobProbe, ...]
    seed: int
    seconds: float
    skipped: str = ""        # why no probe ran at all (the reference failed, ...)

    def of(self, verdict: Verdict) -> list[KnobProbe]:
        return [p for p in self.probes if p.verdict == verdict]


# ---- what the runs print, made comparable ------------------------------------------------

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# a number followed by a unit of time or speed: 12.3ms, 4 s, 0.5sec, 17.2it/s, 3.1 s/it
_TIMED = re.compile(rf"{_NUMBER}\s*(?:ms|us|µs|ns|s|sec|secs|seconds?|mins?|minutes?|h|hours?|"
                    rf"it/s|s/it|tok/s|tokens/s|samples/s)\b", re.IGNORECASE)
# a key about time or speed, then its number: time 12.3, dt=0.4, elapsed: 3, mfu 3.2%, eta 00:12
_KEYED = re.compile(rf"\b(?:time|dt|elapsed|duration|tok/s|tokens/s|tokens_per_sec|throughput|"
                    rf"speed|mfu|eta|samples/s|it/s|wall|took)\b(\s*[:=]?\s*){_NUMBER}%?",
                    re.IGNORECASE)
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?\b")             # 00:12, 19:48:14.5
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]?")                               # 2026-12-06
_RUN_ID = re.compile(r"\b[0-9a-f]{8}-s\d+-[a-z]{3}-[0-9a-f]{6}\b")            # a run's own folder
_HEX = re.compile(r"\b(?:0x[0-9a-f]+|[0-9a-f]{40})\b", re.IGNORECASE)         # addresses, commits
_TMP = re.compile(r"\btmp[\w-]{6,}")                                          # tempfile names
_HAS_NUMBER = re.compile(r"\d")


def comparable(line: str, echo: frozenset[str] = frozenset()) -> str | None:
    """`line` as compared between two runs on one seed: timing numbers, dates, run folders and
    commit ids masked. None for a line that proves nothing either way: blank, or one that
    echoes a line of the target's own text (`echo`), as a script printing its config does."""
    text = line.rstrip("\r\n").split("\r")[-1].strip()    # a progress bar: its last state
    if not text or text in echo:
        return None
    text = _RUN_ID.sub("<run>", text)
    text = _HEX.sub("<hex>", text)
    text = _TMP.sub("<tmp>", text)
    text = _DATE.sub("<date>", text)
    text = _CLOCK.sub("<clock>", text)
    text = _KEYED.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + m.group(1) + "<t>", text)
    text = _TIMED.sub("<t>", text)
    return text


def echo_lines(*sources: str) -> frozenset[str]:
    """The stripped lines of the target's versions: output equal to one of them is an echo."""
    return frozenset(s.strip() for source in sources for s in source.splitlines() if s.strip())


@dataclass(frozen=True)
class ShortRun:
    """What one short run printed: its comparable lines (masked) beside the raw ones."""

    lines: tuple[str, ...]
    raw: tuple[str, ...]
    seconds: float
    stopped: bool            # the probe stopped it (a difference, enough lines, the cap)
    status: Status
    exit_code: int | None
    reason: str


def compare(reference: ShortRun, probe: ShortRun, setting: tuple[Any, Any] | None = None) -> tuple[Verdict, str]:
    """(verdict, evidence) for the outputs of two runs on one seed, over their common prefix.
    `setting` (old, new): the knob's two values; a line that differs only by one printed as
    the other is the script echoing its settings (makemore's `print(vars(args))`), which
    every flag changes whether or not anything reads it: no evidence either way."""
    for i, (a, b) in enumerate(zip(reference.lines, probe.lines)):
        if a != b and not (setting is not None and echoes_setting(a, b, *setting)):
            return "live", f"output line {i + 1} differed: {_short(reference.raw[i])!r} became {_short(probe.raw[i])!r}"
    common = min(len(reference.lines), len(probe.lines))
    if not probe.stopped and len(probe.lines) < len(reference.lines):   # it ended on its own
        return "live", (f"the probe ended after {common} lines ({probe.status.value}"
                        f"{f', exit code {probe.exit_code}' if probe.exit_code else ''}), the reference went on")
    if not reference.stopped and len(reference.lines) < len(probe.lines):
        return "live", f"the probe printed on past the reference's last line ({_short(probe.raw[common])!r})"
    if not any(_HAS_NUMBER.search(line) for line in probe.lines[:common]):
        return "unproven", f"{common} comparable line{'s' if common != 1 else ''}"
    return "dead", f"{common} lines"


def echoes_setting(a: str, b: str, old: Any, new: Any) -> bool:
    """Whether line `b` is line `a` with one printed form of `old` replaced by `new`'s."""
    for before, after in {(str(old), str(new)), (repr(old), repr(new)),
                          (format_value(old), format_value(new))}:
        start = a.find(before)
        while start >= 0 and before:
            if a[:start] + after + a[start + len(before):] == b:
                return True
            start = a.find(before, start + 1)
    return False


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


# ---- the static part: a dataclass field that every construction overwrites ---------------

def overwritten(source: str, knob: Knob) -> Overwrite | None:
    """The calls that overwrite `knob` when it is a dataclass field default that every
    `Class(...)` in `source` passes explicitly (by keyword or by position); None when the
    default can reach the script, the class is never built here, or a call passes `**kw`
    or `*args` (what those hold is not known without a run)."""
    if knob.syntax != "python":
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    owner = _owning_class(tree, knob.line)
    if owner is None or not _is_dataclass(owner):
        return None
    field = knob.name.rpartition(".")[2]
    order = [n.target.id for n in owner.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
             and "ClassVar" not in ast.unparse(n.annotation)]
    position = order.index(field) if field in order and not owner.bases else None
    calls: list[tuple[int, str]] = []
    values: list[ast.expr] = []
    for call in _calls_of(tree, owner.name):
        if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        passed = next((k.value for k in call.keywords if k.arg == field), None)
        if passed is None and position is not None and len(call.args) > position:
            passed = call.args[position]
        if passed is None:
            return None                      # this construction uses the default
        calls.append((call.lineno, ast.get_source_segment(source, passed) or ast.unparse(passed)))
        values.append(passed)
    if not calls:
        return None
    flag, flag_line = _flag_of(tree, values[0])
    return Overwrite(owner.name, field, tuple(calls), flag, flag_line)


def _owning_class(tree: ast.Module, line: int) -> ast.ClassDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                    return node
    return None


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(func, ast.Name) and func.id == "dataclass") or \
                (isinstance(func, ast.Attribute) and func.attr == "dataclass"):
            return True
    return False


def _calls_of(tree: ast.Module, name: str) -> list[ast.Call]:
    return sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == name)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == name))),
        key=lambda c: (c.lineno, c.col_offset))


def _flag_of(tree: ast.Module, value: ast.expr) -> tuple[str | None, int | None]:
    """The `add_argument` flag whose value `value` (`args.n_embd`, `args["n_embd"]`) reads."""
    if isinstance(value, ast.Attribute):
        dest = value.attr
    elif isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, str):
        dest = value.slice.value
    else:
        return None, None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        longs = [n for n in names if n.startswith("--")] or names
        given = next((k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)), None)
        if given == dest or (given is None and longs and longs[0].lstrip("-").replace("-", "_") == dest):
            return longs[0] if longs else f"--{dest}", node.lineno
    return None, None


# ---- the fix for a knob a probe found dead ------------------------------------------------

def dead_fix(source: str, knob: Knob, target: str, seconds: float) -> str:
    """What to do about a knob whose probe changed nothing, from what the source shows."""
    later = (f"if it matters only later than {seconds:.1f} s into a run, have the script print it "
             f"(or something it changes) at the start")
    if knob.syntax != "python":
        return f"check that the script reads {knob.name} from {target}; {later}"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return later
    name = knob.name.rpartition(".")[2]
    owner = _owning_class(tree, knob.line)
    if owner is not None:
        passing = [(c.lineno, k.value) for c in _calls_of(tree, owner.name) for k in c.keywords if k.arg == name]
        if passing:   # some construction overwrites it (not all: then the source alone said so)
            flag, flag_line = _flag_of(tree, passing[0][1])
            calls = tuple((line, ast.get_source_segment(source, value) or ast.unparse(value))
                          for line, value in passing)
            return Overwrite(owner.name, name, calls, flag, flag_line).fix()
        return f"check that the script builds {owner.name} with its defaults; {later}"
    reads, shadows = _global_reads(tree, name)
    if shadows and not reads:
        where = ", ".join(f"{fn}() at line {line}" for fn, line in shadows)
        return (f"{name} (line {knob.line}) is never read: {where} assigns its own {name}, which "
                f"shadows it; use the constant there (drop that assignment), or drop the knob")
    if not reads and _reads_constants(tree):
        return (f"nothing in {target} reads {name} (line {knob.line}): have the script use it, or "
                f"drop the knob")
    return f"check that the script uses {name} (a flag or a later assignment may replace it); {later}"


def _global_reads(tree: ast.Module, name: str) -> tuple[list[int], list[tuple[str, int]]]:
    """Lines where `name` is read as the module's global, and (function, line) of the local
    assignments that shadow it inside a function."""
    reads: list[int] = []
    shadows: list[tuple[str, int]] = []

    def scope(body: list[ast.stmt], fn: str | None, params: dict[int, set[str]] | None = None) -> None:
        params = params or {}                # a parameter of the same name is a local too
        local = None
        if fn is not None:
            declared_global = any(isinstance(n, ast.Global) and name in n.names
                                  for stmt in body for n in ast.walk(stmt))
            stores = sorted([n.lineno for stmt in body for n in _walk_scope(stmt)
                             if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
                            + [line for line in params if name in params[line]])
            if stores and not declared_global:
                local = stores[0]
                shadows.append((fn, local))
        for stmt in body:
            for node in _walk_scope(stmt):
                if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and local is None:
                    reads.append(node.lineno)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    inner = node.body if isinstance(node.body, list) else [ast.Expr(node.body)]
                    every = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + \
                        [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
                    scope(inner, getattr(node, "name", "<lambda>"), {node.lineno: {a.arg for a in every}})
                elif isinstance(node, ast.ClassDef):
                    scope(node.body, None)

    scope(tree.body, None)
    return reads, shadows


def _walk_scope(node: ast.AST):
    """ast.walk that does not enter functions or classes (they are scopes of their own): it
    yields them, and `_global_reads` walks them apart."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_scope(child)


def _reads_constants(tree: ast.Module) -> bool:
    """Whether the target reads any of its own module-level names: a config file that another
    script executes reads none, so "nothing here reads it" would say nothing."""
    assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in assigned for n in ast.walk(tree))


# ---- the probe ---------------------------------------------------------------------------

def probe_values(knob: Knob) -> list[Any]:
    """Up to two other values of the knob's space, the farthest from its current one first:
    the far end of a range then the near one (its middle when the value sits on an end), or
    two other choices. Two, because one can miss: a loss symmetric about its best value
    (dropout 0.2 and 0.0 about 0.1) prints the same for both."""
    if knob.kind == "choice":
        return [c for c in knob.choices if not same_value(c, knob.value)][:2]
    try:
        near_low = knob.normalize(knob.value) <= 0.5
    except (TypeError, ValueError, ZeroDivisionError):
        near_low = True
    far, near = (knob.high, knob.low) if near_low else (knob.low, knob.high)
    middle = (knob.low + knob.high) / 2 if knob.kind == "float" else \
        (knob.low * knob.high) ** 0.5 if knob.kind == "log" else (knob.low + knob.high) // 2
    found: list[Any] = []
    for value in (far, near, middle):
        if not same_value(value, knob.value) and not any(same_value(value, v) for v in found):
            found.append(value)
    return found[:2]


def probe_knobs(program: Program, executor: RunExecutor, workspace: Workspace, head: str, seed: int,
                *, say: Say = lambda text: None, no_runs: str = "") -> ProbeReport | None:
    """Prove each knob of `program`'s target at `head` live: statically where the source
    shows it dead, else by a probe run against a short reference run on `seed`. None when
    the target has no knobs. `no_runs`: why no probe may run (the source is still read)."""
    source = workspace.read(program.target, head)
    try:
        knobs = find_knobs(source, path=program.target, declared=program.knobs)
    except KnobError:
        return None                          # the target-and-knobs check said why
    if not knobs:
        return None
    probes: dict[str, KnobProbe] = {}
    for knob in knobs:
        found = overwritten(source, knob) if program.target.endswith(".py") else None
        if found is not None:
            probes[knob.name] = KnobProbe(knob.name, "dead", knob.value, knob.value,
                                          f"seen in the source (no run): {found.reason()}",
                                          found.fix(), static=True)
            say(f"  {knob.name}: dead, seen in the source (no run): {found.reason()}")
    left = [k for k in knobs if k.name not in probes]
    if not left or no_runs:
        return ProbeReport(tuple(probes[k.name] for k in knobs if k.name in probes), seed, 0.0,
                           skipped=no_runs if left else "")
    cap = max(1.0, min(executor.plan.budget_s, PROBE_CAP_S))
    started = time.monotonic()
    say(f"probing {len(left)} knob{'s' if len(left) > 1 else ''} on seed {seed}: a reference run "
        f"of {head[:8]}, then one run per knob moved (at most {cap:g} s each)")
    reference = _short_run(executor, head, seed, cap, echo_lines(source), None)
    if not reference.stopped and reference.status != Status.OK and reference.exit_code:
        why = (f"not probed: the unchanged script exited with code {reference.exit_code} after "
               f"{reference.seconds:.1f} s on seed {seed} ({_short(reference.reason, 80)})")
        return ProbeReport(tuple(probes[k.name] for k in knobs if k.name in probes), seed,
                           time.monotonic() - started, skipped=why)
    for knob in left:
        probes[knob.name] = _probe_one(program, executor, workspace, head, seed, source, knob,
                                       reference, cap, say)
    return ProbeReport(tuple(probes[k.name] for k in knobs), seed, time.monotonic() - started)


def _probe_one(program: Program, executor: RunExecutor, workspace: Workspace, head: str, seed: int,
               source: str, knob: Knob, reference: ShortRun, cap: float, say: Say) -> KnobProbe:
    """Move `knob` to each of its probe values in turn until one changes the output: dead only
    when none did."""
    tried: list[Any] = []
    seconds = 0.0
    evidence = ""
    for new in probe_values(knob):
        change = f"{knob.name} {format_value(knob.value)} -> {format_value(new)}"
        try:   # the edit a night would make, committed apart: the user's files never change
            edited = set_knobs(source, {knob.name: new}, path=program.target, declared=program.knobs)
            commit = workspace.commit_candidate(program.target, edited, f"nightshift check: probe {change}",
                                                parent=head)
        except (KnobError, WorkspaceError) as error:
            return KnobProbe(knob.name, "unproven", knob.value, new, f"not probed: {error}",
                             "fix the knob as the message says")
        try:
            run = _short_run(executor, commit, seed, cap, echo_lines(source, edited), reference,
                             (knob.value, new))
        finally:
            executor.release(commit)
        verdict, evidence = compare(reference, run, (knob.value, new))
        seconds = max(seconds, run.seconds)
        tried.append(new)
        say(f"  {change}: {verdict} ({evidence}; {run.seconds:.1f} s)")
        if verdict == "live":
            return KnobProbe(knob.name, "live", knob.value, new, evidence, seconds=run.seconds)
        if verdict == "unproven":   # nothing comparable: another value would print nothing either
            return KnobProbe(knob.name, "unproven", knob.value, new,
                             f"not proven live: the script prints no configuration or loss before "
                             f"{run.seconds:.1f} s ({evidence})",
                             "print the configuration or the first losses early in the run",
                             seconds=run.seconds)
    values = " or ".join(format_value(v) for v in tried)
    return KnobProbe(knob.name, "dead", knob.value, tried[-1],
                     f"changing {knob.name} {format_value(knob.value)} -> {values} changed nothing the "
                     f"script printed in {seconds:.1f} s on seed {seed} ({evidence})",
                     dead_fix(source, knob, program.target, seconds), seconds=seconds)


def _short_run(executor: RunExecutor, commit: str, seed: int, cap_s: float, echo: frozenset[str],
               reference: ShortRun | None, setting: tuple[Any, Any] | None = None) -> ShortRun:
    """Run `commit` on `seed` through check's executor (sandbox, snapshot, ledger) until the
    reference has printed REFERENCE_LINES comparable lines, a probe's output differs from the
    reference's or has matched all of it, or `cap_s` has passed."""
    lines: list[str] = []
    raw: list[str] = []
    stop = threading.Event()

    def on_line(text: str) -> None:
        if stop.is_set():
            return                           # the run is being killed: what follows is not compared
        masked = comparable(text, echo)
        if masked is None:
            return
        lines.append(masked)
        raw.append(text.strip())
        if reference is None:
            if len(lines) >= REFERENCE_LINES:
                stop.set()
        elif len(lines) > len(reference.lines) or len(lines) == len(reference.lines):
            stop.set()
        else:
            mine = reference.lines[len(lines) - 1]
            if masked != mine and not (setting is not None and echoes_setting(mine, masked, *setting)):
                stop.set()

    timer = threading.Timer(cap_s, stop.set)
    timer.daemon = True
    began = time.monotonic()
    timer.start()
    try:
        run: RunFinished = executor.run(commit, seed, Role.NOISE, None, on_output=on_line, stop=stop)
    finally:
        timer.cancel()
    return ShortRun(tuple(lines), tuple(raw), time.monotonic() - began, stop.is_set(), run.status,
                    run.exit_code, run.reason)


# ---- the check line ----------------------------------------------------------------------

def record(verdict: Checklist, report: ProbeReport, *, dead_ok: bool = False) -> None:
    """Add the `knobs live` line to check's Checklist `verdict`: a failure when a knob is
    dead (a warning with `dead_ok`, the user's opt-out), a warning when one is not proven."""
    ran = any(not p.static for p in report.probes) or report.seconds > 0
    spent = f"probes took {report.seconds:.1f} s on seed {report.seed}" if ran else "no probe run needed"
    dead, live, unproven = report.of("dead"), report.of("live"), report.of("unproven")
    parts = []
    if dead:
        parts.append("dead: " + "; ".join(p.says() for p in dead))
    if unproven:
        parts.append("; ".join(p.says() for p in unproven))
    if report.skipped:
        parts.append(report.skipped)
    if live:
        parts.append("live: " + "; ".join(p.says() for p in live))
    detail = ". ".join(parts) + f" ({spent})"
    fixes = "; ".join(f"{p.knob}: {p.fix}" for p in dead + unproven if p.fix)
    if dead and not dead_ok:
        verdict.add("knobs live", False, detail, fixes + f" (or pass {OPT_OUT} to run the night anyway)")
    elif dead or unproven or report.skipped:
        note = f" ({OPT_OUT}: not a failure)" if dead else ""
        verdict.add("knobs live", None, detail + note, fixes)
    else:
        verdict.add("knobs live", True, f"{len(live)} of {len(live)} proven live: " + detail.removeprefix("live: "))
