"""The tools an LLM researcher may call, and their execution against an in-memory draft.

One workbench for every provider: `TOOLS` are declared once with a JSON schema, and each
API's researcher turns them into its own shape (`input_schema` for Anthropic, `function`
for OpenAI-compatible endpoints). A `Workbench` is the model's whole view of the repository
during one proposal: a draft of the target (starting as the incumbent source) and the
protected files, read-only. Nothing here touches the disk or git: the loop commits the
submitted source itself.

Every tool either returns the text to give back to the model, or raises `ToolError`, whose
`kind` names the mistake (the researcher counts them) and whose message tells the model what
was wrong and how to fix it. An edit that raises is never applied, and `run_turn` makes the
calls of one turn all-or-nothing: when one edit fails, none of that turn's edits is applied
and its `submit` is refused, because the prediction was made for all of them together.
"""
from __future__ import annotations

import ast
import difflib
import posixpath
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from agent.record.records import Direction
from agent.researchers.base import Prediction
from agent.researchers.prediction import parse_prediction
from agent.researchers.tool_specs import EDITS, TOOL_NAMES

MAX_READ_CHARS = 40_000      # one read_file answer; keeps a turn's context bounded
MAX_DETAIL_CHARS = 12_000    # one show_experiment answer (diff + log tail)
MAX_DESCRIPTION_CHARS = 160  # goes into results.tsv and the commit subject

# The kinds of mistake a tool reports; the researcher counts each.
ERROR_KINDS = (
    "bad_input", "unknown_tool", "outside_target", "edit_not_found", "edit_not_unique",
    "syntax_error", "no_change", "bad_submission", "bad_prediction", "unavailable",
)
# What a turn's result may also say: an edit that applied but was rolled back with its turn.
RESULT_KINDS = (*ERROR_KINDS, "rolled_back")


class ToolError(Exception):
    """A tool call that cannot be carried out; answered to the model as an error."""

    def __init__(self, kind: str, message: str) -> None:
        assert kind in RESULT_KINDS, kind
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Submission:
    """A validated call to `submit`: the draft plus its pre-registered prediction."""

    source: str
    description: str
    hypothesis: str
    prediction: Prediction
    hypothesis_id: str | None




@dataclass(frozen=True)
class ToolCall:
    """One call as the model made it. `problem` is set when its input could not even be
    decoded (an OpenAI-compatible endpoint's arguments that are not JSON)."""

    id: str
    name: str
    input: Any
    problem: str | None = None


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    text: str
    error: str | None = None          # the mistake's kind, or None for a success

    @property
    def is_error(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class TurnResult:
    results: tuple[ToolResult, ...]   # one per call, in the order of the calls
    submission: "Submission | None"   # set when the turn's submit was accepted
    rolled_back: bool = False         # an edit failed, so none of the turn's edits applied


def _clip(text: str, limit: int) -> str:
    """Keep the head and the tail of `text` within `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def _numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{n}\t{line}" for n, line in enumerate(text.splitlines(), start))


class Workbench:
    """The draft of the target plus read-only protected files, for one proposal."""

    def __init__(
        self,
        target: str,
        incumbent_source: str,
        protected: Mapping[str, str],
        metric_direction: Direction,
        hypothesis_ids: tuple[str, ...] = (),
        experiment_detail: Callable[[str], str] | None = None,
    ) -> None:
        self.target = posixpath.normpath(target)
        self.incumbent = incumbent_source
        self.draft = incumbent_source
        self.protected = {posixpath.normpath(p): s for p, s in protected.items()}
        self.metric_direction = metric_direction
        self.hypothesis_ids = hypothesis_ids
        self.experiment_detail = experiment_detail

    # ---- dispatch -------------------------------------------------------------------------
    def execute(self, name: str, tool_input: Any) -> str | Submission:
        """Run one tool call. Returns the text answer, or a Submission for a valid submit."""
        handler = getattr(self, f"_tool_{name}", None) if name in TOOL_NAMES else None
        if handler is None:
            raise ToolError("unknown_tool", f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
        if not isinstance(tool_input, dict):
            raise ToolError("bad_input", f"{name} input must be a JSON object, got {type(tool_input).__name__}")
        return handler(tool_input)

    def run_turn(self, calls: list[ToolCall]) -> TurnResult:
        """Run one turn's calls, all-or-nothing for its edits. Calls run in order, except
        `submit`, which runs last, on the turn's final draft, and only when every edit of the
        turn applied; a second submit in one turn is refused."""
        before = self.draft
        results: dict[str, ToolResult] = {}
        failed: tuple[ToolCall, ToolError] | None = None
        edited_at: int | None = None
        others = [c for c in calls if c.name != "submit"]
        submits = [c for c in calls if c.name == "submit"]
        for n, call in enumerate(others):
            try:
                if call.problem:
                    raise ToolError("bad_input", f"{call.name}: {call.problem}")
                results[call.id] = ToolResult(call.id, self.execute(call.name, call.input))  # type: ignore[arg-type]
                if call.name in EDITS and edited_at is None:
                    edited_at = n
            except ToolError as err:
                results[call.id] = ToolResult(call.id, err.message, err.kind)
                if call.name in EDITS and failed is None:
                    failed = (call, err)
        submission = None
        if failed is not None:
            self.draft = before
            why = f"{failed[0].name} call {failed[0].id} failed ({failed[1].message.splitlines()[0][:160]})"
            for n, call in enumerate(others):
                done = results[call.id]
                if done.is_error:
                    continue
                if call.name in EDITS:
                    results[call.id] = ToolResult(call.id, f"{call.name}: not applied, because {why}. The "
                                                  f"edits of one turn apply together or not at all: the "
                                                  f"draft is as it was before this turn. Send them again "
                                                  f"with the fix.", "rolled_back")
                elif edited_at is not None and n > edited_at:
                    results[call.id] = ToolResult(call.id, done.text + "\n[this turn's edits were then "
                                                  "rolled back: the draft no longer holds them]")
            for call in submits:
                results[call.id] = ToolResult(call.id, f"submit was not accepted: {why}, so no edit of this "
                                              f"turn was applied. Fix the edit, then submit again.", "rolled_back")
        else:
            for n, call in enumerate(submits):
                try:
                    if n:
                        raise ToolError("bad_submission", "submit: only one submit per turn; this one was ignored")
                    if call.problem:
                        raise ToolError("bad_submission", f"submit: {call.problem}")
                    result = self.execute(call.name, call.input)
                    assert isinstance(result, Submission)
                    submission = result
                    results[call.id] = ToolResult(call.id, "submitted")
                except ToolError as err:
                    results[call.id] = ToolResult(call.id, err.message, err.kind)
        return TurnResult(tuple(results[c.id] for c in calls), submission, failed is not None)

    # ---- helpers --------------------------------------------------------------------------
    @staticmethod
    def _string(tool_input: dict, field: str, name: str, *, allow_empty: bool = True) -> str:
        value = tool_input.get(field)
        if not isinstance(value, str) or (not allow_empty and not value):
            raise ToolError("bad_input", f"{name}: field {field!r} must be a{'' if allow_empty else ' non-empty'} string, got {value!r:.80}")
        return value

    def _path(self, tool_input: dict, name: str) -> str:
        raw = self._string(tool_input, "path", name, allow_empty=False)
        path = posixpath.normpath(raw.removeprefix("./"))
        if path.startswith("/") or path.startswith(".."):
            raise ToolError("outside_target", f"{name}: {raw!r} is outside the repository; use repository-relative paths")
        return path

    def _editable(self, tool_input: dict, name: str) -> str:
        path = self._path(tool_input, name)
        if path != self.target:
            raise ToolError(
                "outside_target",
                f"{name}: {path} may not be changed; the only file you may edit is {self.target}",
            )
        return path

    def _check_parses(self, source: str, name: str) -> None:
        if not self.target.endswith(".py"):
            return
        try:
            ast.parse(source, filename=self.target)
        except SyntaxError as err:
            raise ToolError(
                "syntax_error",
                f"{name}: the edit was NOT applied because {self.target} would not parse: "
                f"{err.msg} at line {err.lineno}, column {err.offset}. Fix the new text, or "
                f"make related changes in one edit.",
            ) from None

    def _change_summary(self) -> str:
        diff = difflib.unified_diff(self.incumbent.splitlines(), self.draft.splitlines(), lineterm="")
        added = removed = 0
        for line in diff:
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        return f"the draft differs from the incumbent by +{added} -{removed} lines"

    # ---- tools ----------------------------------------------------------------------------
    def _tool_read_file(self, tool_input: dict) -> str:
        path = self._path(tool_input, "read_file")
        if path == self.target:
            text = self.draft
        elif path in self.protected:
            text = self.protected[path]
        else:
            readable = ", ".join([self.target, *sorted(self.protected)])
            raise ToolError("outside_target", f"read_file: {path} is not readable; readable files: {readable}")
        lines = text.splitlines()
        start, end = tool_input.get("start_line", 1), tool_input.get("end_line", len(lines))
        if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool) or isinstance(end, bool):
            raise ToolError("bad_input", "read_file: start_line and end_line must be integers")
        start, end = max(1, start), min(len(lines), end)
        body = _numbered("\n".join(lines[start - 1:end]), start)
        if len(body) > MAX_READ_CHARS:
            body = body[:MAX_READ_CHARS] + "\n[... cut; read a smaller range with start_line/end_line ...]"
        return f"{path} lines {start}-{end} of {len(lines)}:\n{body}"

    def _tool_edit_file(self, tool_input: dict) -> str:
        self._editable(tool_input, "edit_file")
        old = self._string(tool_input, "old_string", "edit_file", allow_empty=False)
        new = self._string(tool_input, "new_string", "edit_file")
        if old == new:
            raise ToolError("bad_input", "edit_file: old_string and new_string are identical; nothing to change")
        count = self.draft.count(old)
        if count == 0:
            raise ToolError(
                "edit_not_found",
                f"edit_file: old_string was not found in {self.target}; it must match the "
                f"current draft exactly (read_file shows it; line numbers are not part of it)",
            )
        if count > 1:
            raise ToolError(
                "edit_not_unique",
                f"edit_file: old_string occurs {count} times in {self.target}; include more "
                f"surrounding lines so it occurs exactly once",
            )
        at = self.draft.index(old)
        candidate = self.draft[:at] + new + self.draft[at + len(old):]
        self._check_parses(candidate, "edit_file")
        self.draft = candidate
        first = self.draft.count("\n", 0, at) + 1
        return f"edited {self.target} at line {first}; {self._change_summary()}"

    def _tool_write_file(self, tool_input: dict) -> str:
        self._editable(tool_input, "write_file")
        content = self._string(tool_input, "content", "write_file", allow_empty=False)
        self._check_parses(content, "write_file")
        self.draft = content
        return f"wrote {self.target} ({len(content.splitlines())} lines); {self._change_summary()}"

    def _tool_show_draft_diff(self, tool_input: dict) -> str:
        diff = "\n".join(difflib.unified_diff(
            self.incumbent.splitlines(), self.draft.splitlines(),
            f"a/{self.target}", f"b/{self.target}", lineterm="",
        ))
        return _clip(diff, MAX_READ_CHARS) if diff else "the draft is identical to the incumbent"

    def _tool_show_experiment(self, tool_input: dict) -> str:
        experiment_id = self._string(tool_input, "experiment_id", "show_experiment", allow_empty=False)
        if self.experiment_detail is None:
            raise ToolError("unavailable", "show_experiment is not available in this run; use the ledger summary")
        try:
            detail = self.experiment_detail(experiment_id)
        except (KeyError, LookupError, ValueError, OSError) as err:
            raise ToolError("bad_input", f"show_experiment: no experiment {experiment_id!r} ({err})") from None
        return _clip(detail, MAX_DETAIL_CHARS)

    def _tool_submit(self, tool_input: dict) -> Submission:
        problems: list[str] = []
        if self.draft == self.incumbent:
            raise ToolError("no_change", "submit: the draft is identical to the incumbent; edit the target first")
        description = tool_input.get("description")
        if not isinstance(description, str) or not description.strip():
            problems.append("description must be a non-empty one-line string")
        elif "\n" in description.strip() or len(description.strip()) > MAX_DESCRIPTION_CHARS:
            problems.append(f"description must be one line of at most {MAX_DESCRIPTION_CHARS} characters")
        hypothesis = tool_input.get("hypothesis")
        if not isinstance(hypothesis, str) or not hypothesis.strip():
            problems.append("hypothesis must be a non-empty string")
        hypothesis_id = tool_input.get("hypothesis_id") or None
        if hypothesis_id is not None and hypothesis_id not in self.hypothesis_ids:
            known = ", ".join(self.hypothesis_ids) or "none are queued"
            problems.append(f"hypothesis_id {hypothesis_id!r} is not a queued hypothesis ({known})")
        prediction, prediction_problems = parse_prediction(tool_input.get("prediction"), self.metric_direction)
        problems += prediction_problems
        if problems:
            kind = "bad_prediction" if prediction_problems else "bad_submission"
            raise ToolError(kind, "submit was not accepted:\n- " + "\n- ".join(problems))
        assert prediction is not None
        return Submission(
            source=self.draft, description=description.strip(), hypothesis=hypothesis.strip(),
            prediction=prediction, hypothesis_id=hypothesis_id,
        )
