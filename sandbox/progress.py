"""A run's progress, read from the lines it prints while it trains.

Three shapes of progress line are understood, tried in this order on every line:

- program.md's `metrics_pattern` (a regex with named groups), e.g. nanoGPT's
  `iter (?P<iter>\\d+): loss (?P<train_loss>[0-9.]+), time (?P<ms_per_iter>[0-9.]+)ms`;
- the bundled train.py's step lines, `step 300 | loss 2.4512 | lr 1.0e-02 | ... | elapsed 14.2s`
  (`name value` pairs between `|`, the first being `step N`; a name of several words is one
  figure, makemore's `step 10 | loss 2.31 | step time 12.3ms` has `step_time`);
- nanoGPT's iteration lines, `iter 10: loss 2.3011, time 85.12ms, mfu 0.02%` (`iter N:` then
  `name value` pairs between commas);
- a tqdm bar, `  5%|▌    | 100/2000 [00:08<02:30, 12.6it/s]` (the last `\\r` update of a line),
  which also says how many steps the run will take;
- a Hugging Face Trainer log dict, `{'loss': 2.1, 'grad_norm': 0.8, 'learning_rate': 5e-05, 'epoch': 0.5}`
  (transformers 4.4x and later print its numbers as strings, `{'loss': '2.1', ...}`). It
  names no step: it takes the step and total of the run's progress bar as last drawn (the
  Trainer's bar counts optimizer steps and redraws at most every 0.1 s, so a few steps behind
  at most). The Trainer's summary at the end of training (`train_runtime`, and `train_loss`
  the mean over the whole run) is no point of the curve.

`ProgressReader.feed(line)` returns a `ProgressPoint` for a progress line and None for any
other. A `metrics_pattern` match without a step (a pattern that names only some figures of
the line) takes its step and loss from the line's own shape, its figures from the pattern.
A line holding several `\r` updates (a tqdm bar and a message written over it) counts by
its last update that is progress. It never raises on what a run prints: a script's output is data, not a contract.
Which figure is the step, the loss and the script's own training clock is read from the
names: `step`/`iter`/`iteration`; `loss`/`train_loss`; `elapsed`/`train_time`/`train_seconds`.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

STEP_NAMES = ("step", "iter", "iteration", "it")
LOSS_NAMES = ("loss", "train_loss")
ELAPSED_NAMES = ("elapsed", "elapsed_s", "train_time", "train_seconds")
SUMMARY_NAME = "train_runtime"   # a Trainer log dict that sums up the run, not a point of it

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
# A figure's name may be several words (makemore's `step time 12.34ms`): read as `step_time`.
_NAME = r"[A-Za-z_][\w.]*(?:[ \t]+[A-Za-z_][\w.]*)*"
# Each stretch of spaces has one place in these patterns (`\s*(?:[:=]\s*)?`, not `\s*[:=]?\s*`):
# two optional runs of spaces side by side split every space two ways, and a line of n pairs
# that fails at its end was tried 4**n ways (12 pairs took 10 s; a script's output is data).
_STEP_LINE = re.compile(rf"^\s*step\s+(\d+)\s*((?:\|\s*{_NAME}\s*(?:[:=]\s*)?(?:{_NUMBER})(?:\s*[a-z%]+)?\s*)*)$")
_PAIR = re.compile(rf"\|\s*({_NAME})\s*(?:[:=]\s*)?({_NUMBER})(?:\s*([a-z%]+))?")
_ITER_LINE = re.compile(rf"^\s*iter(?:ation)?\s+(\d+):\s*(.*)$")
_COMMA_PAIR = re.compile(rf"^\s*([A-Za-z_][\w.]*)\s*[:=]?\s*({_NUMBER})\s*([a-z%]*)\s*$")
_TQDM = re.compile(r"(\d+)/(\d+)\s*\[(?:(\d+):)?(\d+):(\d+)(?:<[^,\]]*)?(?:,\s*([0-9.]+)\s*(it/s|s/it))?")


@dataclass(frozen=True)
class ProgressPoint:
    """One progress line: what the run said about how far it is and how it is doing."""

    step: int | None = None             # optimizer steps (iterations) so far
    loss: float | None = None           # the training loss the line reports
    elapsed_s: float | None = None      # the script's own clock: training seconds so far
    total_steps: int | None = None      # how many steps the run will take, when it says (tqdm)
    values: dict[str, float] = field(default_factory=dict)   # every figure of the line by name


class ProgressReader:
    """Turns a run's lines into progress points (see the module docstring)."""

    def __init__(self, metrics_pattern: str | None = None) -> None:
        self._pattern = re.compile(metrics_pattern) if metrics_pattern else None
        self._bar: ProgressPoint | None = None      # the run's progress bar as last drawn

    def feed(self, line: str) -> ProgressPoint | None:
        updates = [part for part in line.split("\r") if part.strip()]
        points = [point for update in updates if (point := self._read(update)) is not None]
        return points[-1] if points else None      # the latest update that says something

    def _read(self, line: str) -> ProgressPoint | None:
        bar = _from_tqdm(line)
        if bar is not None:
            self._bar = bar
        shaped = _from_step_line(line) or _from_iter_line(line) or bar or _from_dict_line(line, self._bar)
        pattern = self._from_pattern(line)
        if pattern is None:
            return shaped
        if pattern.step is None and shaped is not None:
            return _point({**shaped.values, **pattern.values})
        return pattern

    def _from_pattern(self, line: str) -> ProgressPoint | None:
        if self._pattern is None:
            return None
        match = self._pattern.search(line)
        if match is None:
            return None
        values = {name: number for name, text in match.groupdict().items()
                  if text is not None and (number := _number(text)) is not None}
        return _point(values) if values else None


def _from_step_line(line: str) -> ProgressPoint | None:
    match = _STEP_LINE.match(line)
    if match is None:
        return None
    values: dict[str, float] = {"step": float(match.group(1))}
    for name, text, unit in _PAIR.findall(match.group(2)):
        number = _number(text)
        if number is not None:
            values["_".join(name.split())] = _in_seconds(number, unit)
    return _point(values)


def _from_iter_line(line: str) -> ProgressPoint | None:
    match = _ITER_LINE.match(line)
    if match is None:
        return None
    values: dict[str, float] = {"iter": float(match.group(1))}
    for part in match.group(2).split(","):
        pair = _COMMA_PAIR.match(part)
        number = _number(pair.group(2)) if pair else None
        if number is not None:
            values[pair.group(1)] = _in_seconds(number, pair.group(3))   # `time 85.12ms`: 85.12
    return _point(values)


def _in_seconds(number: float, unit: str) -> float:
    """Minutes become seconds (`elapsed 1.5min`); other units stay as printed."""
    return number * 60 if unit == "min" else number


def _from_tqdm(line: str) -> ProgressPoint | None:
    match = _TQDM.search(line)
    if match is None:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    hours, minutes, seconds = (int(g) if g else 0 for g in match.group(3, 4, 5))
    values = {"step": float(done), "total_steps": float(total),
              "elapsed": float(hours * 3600 + minutes * 60 + seconds)}
    if match.group(6):
        rate = float(match.group(6))
        values["steps_per_s"] = rate if match.group(7) == "it/s" else (1 / rate if rate else 0.0)
    return _point(values)


def _from_dict_line(line: str, bar: ProgressPoint | None = None) -> ProgressPoint | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}") and "loss" in text) or len(text) > 4096:
        return None
    try:
        data = ast.literal_eval(text)   # literals only: a printed dict, never code
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict) or SUMMARY_NAME in data:
        return None
    values = {str(k): number for k, v in data.items() if (number := _dict_number(v)) is not None}
    if not any(name in values for name in LOSS_NAMES):
        return None
    if _first(values, STEP_NAMES) is None and bar is not None and bar.step is not None:
        values = {**values, "step": float(bar.step), "total_steps": float(bar.total_steps or 0) or bar.step}
    return _point(values)


def _dict_number(value: object) -> float | None:
    """A printed dict's number: an int or float, or a string that is one (`'2.1'`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
        return _number(value.strip())
    return None


def _point(values: dict[str, float]) -> ProgressPoint:
    step = _first(values, STEP_NAMES)
    total = values.get("total_steps")
    return ProgressPoint(step=int(step) if step is not None and math.isfinite(step) else None,
                         loss=_first(values, LOSS_NAMES), elapsed_s=_first(values, ELAPSED_NAMES),
                         total_steps=int(total) if total is not None else None, values=values)


def _first(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((values[name] for name in names if name in values), None)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
