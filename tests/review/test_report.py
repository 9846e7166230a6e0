"""The morning report renders for any ledger, is self-contained, and draws in a real browser."""
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from agent.review.report import build_context, write_report
from tests.ledger_factory import synthetic_night
from tests.needs import needs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Injected at the top of <head> of a copy of the report: records script errors, failed loads
# (capture phase sees them), console.error and every resource the page fetched, then exercises
# the table's sorting and filtering, and writes what it saw into the DOM for --dump-dom.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) {
  window.__errors.push(e.message || ("failed to load " + ((e.target && (e.target.src || e.target.href)) || "?")));
}, true);
window.addEventListener("unhandledrejection", function (e) { window.__errors.push("rejection: " + e.reason); });
var __consoleError = console.error;
console.error = function () { window.__errors.push("console.error: " + Array.prototype.join.call(arguments, " ")); };
window.addEventListener("load", function () {
  var table = document.getElementById("experiments");
  var headers = table.tHead.rows[0].cells;
  for (var i = 0; i < headers.length; i++) { if (headers[i].getAttribute("data-sort")) headers[i].click(); }
  var filter = document.getElementById("verdict-filter");
  filter.value = "keep"; filter.dispatchEvent(new Event("change"));
  var visibleKept = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return r.style.display !== "none"; }).length;
  var svg = document.getElementById("progress-svg").getBoundingClientRect();
  var probe = document.createElement("pre");
  probe.id = "__probe";
  probe.textContent = JSON.stringify({
    errors: window.__errors,
    resources: performance.getEntriesByType("resource").map(function (r) { return r.name; }),
    points: document.querySelectorAll("#progress-svg .point").length,
    frontier: !!document.querySelector("#progress-svg .frontier"),
    rows: table.tBodies[0].rows.length, visible_kept: visibleKept,
    svg_width: svg.width, svg_height: svg.height
  });
  document.body.appendChild(probe);
});
</script>"""


def open_in_chromium(report: Path, tmp_path: Path) -> dict:
    page = tmp_path / "probe.html"
    page.write_text(report.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1),
                    encoding="utf-8")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="__probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page did not finish loading in Chromium:\n{done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def experiment_count(tag_dir: Path) -> int:
    return len(build_context(tag_dir)["experiments"])


@pytest.fixture(scope="module")
def long_night(tmp_path_factory):
    """500 synthetic experiments (written once for the module: it takes seconds)."""
    return synthetic_night(tmp_path_factory.mktemp("long") / "long", experiments=500)


def test_report_of_an_empty_tag_says_so(tmp_path):
    Ledger(tmp_path / "empty")
    written = write_report(tmp_path / "empty")
    page = written.html.read_text()
    assert "No experiments yet." in page and "no measurements yet" in page
    assert written.png and written.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_crashes_only_lists_every_failure(tmp_path):
    tag = synthetic_night(tmp_path / "crashes", experiments=6, crashes_only=True)
    context = build_context(tag)
    assert context["n_kept"] == 0 and context["improvement"] is None
    assert sum(context["counts"].values()) == 6 and "keep" not in context["counts"]
    assert context["chart"]["failed"] == 6
    page = write_report(tag).html.read_text()
    assert page.count('class="point cross') == 6


def test_long_report_escapes_researcher_text_and_keeps_diffs(long_night, tmp_path):
    written = write_report(long_night, out=tmp_path / "report.html")
    page = written.html.read_text()
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<b>&amp;</b>" not in page
    assert page.count("<tr class=") == 500
    assert "+LR = 42e-4" in page                      # a diff, from the run's provenance.json
    assert "Spearman rank correlation" in page and "torch" in page
    spent = fold(read_events(long_night)).usage.usd   # recorded on each experiment's events
    assert spent > 5 and f"${spent:.2f}" in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "the report must not load anything"


def test_the_cost_splits_the_prompt_and_each_experiment_links_its_transcript(long_night, tmp_path):
    page = write_report(long_night, out=tmp_path / "elsewhere" / "report.html").html.read_text()
    assert "cache writes 1 h" in page and "cache writes 5 min" in page and "from the cache" in page
    assert "tries retried" in page
    link = re.search(r'href="([^"]*researcher/transcripts/0001\.json)"', page)
    assert link, "no transcript link"
    assert (tmp_path / "elsewhere" / link.group(1)).resolve() == (long_night / "researcher/transcripts/0001.json").resolve()


@needs("chromium")
@pytest.mark.parametrize("kind", ["empty", "crashes", "long"])
def test_report_draws_in_headless_chromium_without_errors(tmp_path, kind, long_night):
    tag = long_night if kind == "long" else tmp_path / kind
    if kind == "empty":
        Ledger(tag)
    elif kind == "crashes":
        synthetic_night(tag, experiments=6, crashes_only=True)
    n = experiment_count(tag)
    seen = open_in_chromium(write_report(tag, out=tmp_path / "report.html").html, tmp_path)
    assert seen["errors"] == []
    assert seen["resources"] == []                  # self-contained: nothing fetched
    assert seen["rows"] == n and seen["points"] == n
    assert seen["svg_width"] > 300 and seen["svg_height"] > 100
    if kind == "long":
        assert seen["frontier"] and 0 < seen["visible_kept"] < n


def test_cli_report_writes_html_and_png(tmp_path):
    (tmp_path / "program.md").write_text("---\nmetric: val_bpb\n---\nprose\n")
    synthetic_night(tmp_path / "results" / "night1", experiments=20)
    done = subprocess.run([sys.executable, "-m", "agent.cli", "report", "--tag", "night1",
                           "--program", str(tmp_path / "program.md")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "results" / "night1" / "report.html").exists()
    assert (tmp_path / "results" / "night1" / "progress.png").exists()
    missing = subprocess.run([sys.executable, "-m", "agent.cli", "report", "--tag", "nope",
                              "--program", str(tmp_path / "program.md")],
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert missing.returncode == 1 and "night1" in missing.stderr


def test_the_report_lists_every_run_stopped_early_and_the_time_saved(tmp_path):
    from agent.record.events import (Decision, DecisionMade, ExperimentProposed, LoopStarted, Role,
                                     RunFinished, RunStarted, RunStoppedEarly, RunUnpaired, Verdict)
    from sandbox import Status

    ledger = Ledger(tmp_path / "es")
    ledger.append(LoopStarted(tag="es", base_commit="b" * 40, program={"early_stop": {"mode": "auto"}}))
    ledger.append(RunFinished(run_id="ref", commit="b" * 40, seed=1000, role=Role.REFERENCE, status=Status.OK,
                              metric=2.0, started=100.0, ended=170.0))
    for i, (gap, description) in enumerate(((-0.4, "LR x10"), (-0.9, "N_LAYER 6"))):
        eid, commit = f"e000{i + 1}", f"{i + 1}" * 40
        ledger.append(ExperimentProposed(id=eid, commit=commit, parent="b" * 40, description=description))
        ledger.append(RunStarted(run_id=f"r{i}", commit=commit, seed=1000, role=Role.CANDIDATE, experiment=eid))
        ledger.append(RunStoppedEarly(run_id=f"r{i}", experiment=eid, seed=1000, checkpoint=0.25, reached=0.26,
                                      gap=gap, predicted=2 * gap, interval=(3 * gap, gap), bound=gap, pairs=20,
                                      partner="same seed", saved_s=45.0, reason="a discard stopped early at 25%"))
        ledger.append(RunFinished(run_id=f"r{i}", commit=commit, seed=1000, role=Role.CANDIDATE, experiment=eid,
                                  status=Status.INTERRUPTED, reason="stopped early at 26%", started=200.0,
                                  ended=225.0))
        ledger.append(DecisionMade(id=eid, commit=commit, incumbent="b" * 40, verdict=Verdict.DISCARD,
                                   reason="a discard stopped early at 25%",
                                   decision=Decision(verdict=Verdict.DISCARD, rule="early_stop")))
    ledger.append(RunUnpaired(run_id="r9", experiment="e0002", reason="a different context (64x128 against 64x64)"))
    context = build_context(tmp_path / "es")
    early = context["early"]
    assert [s["id"] for s in early["stops"]] == ["e0001", "e0002"] and early["saved_s"] == 90.0
    assert early["share"] == 90.0 / (70.0 + 25.0 + 25.0 + 90.0)           # of what the runs would have taken
    assert early["unpaired"] == {"a different context": 1}
    page = " ".join(re.sub(r"<[^>]+>", "", html.unescape(write_report(tmp_path / "es").html.read_text())).split())
    assert "2 candidate runs stopped early" in page and "43% of what the night's runs would have taken" in page
    assert "-0.8000 [-1.2000, -0.4000]" in page and "N_LAYER 6" in page
    assert "stopped early at 25%: a discard, not a measurement" in page     # the experiment's row says so


def test_flagged_candidates_show_their_evidence_in_the_report_and_status(tmp_path):
    """A misreport (the script's value beside the evaluator's) and an experiment-level flag
    (its figures on the decision): the report's panel and `status` name both."""
    from agent.record.events import (DecisionMade, ExperimentProposed, LoopStarted, Probe, RunFinished,
                                     Verdict)
    from sandbox import Status

    folder = tmp_path / "results" / "flags"
    ledger = Ledger(folder)
    ledger.append(LoopStarted(tag="flags", base_commit="base0000"))
    for seed in range(2):
        ledger.append(RunFinished(run_id=f"b{seed}", commit="base0000", seed=seed, role="reference",
                                  status=Status.OK, metric=2.0 + seed / 50, measured_by="evaluator"))
    ledger.append(ExperimentProposed(id="e0001", commit="c1", parent="base0000", description="report 0.5"))
    ledger.append(RunFinished(run_id="r1", commit="c1", seed=1000, role="candidate", experiment="e0001",
                              status=Status.MISREPORTED, reported=0.5, metrics={"val_bpb": 3.79},
                              probes=(Probe("causality", True, "0 nats"),), measured_by="evaluator",
                              reason="the script reported val_bpb 0.5, the evaluator measured 3.79"))
    ledger.append(DecisionMade(id="e0001", commit="c1", incumbent="base0000", verdict=Verdict.MISREPORTED,
                               reason="misreported on seed 1000: the script reported val_bpb 0.5"))
    ledger.append(ExperimentProposed(id="e0002", commit="c2", parent="base0000", description="ten times the budget"))
    ledger.append(DecisionMade(id="e0002", commit="c2", incumbent="base0000", verdict=Verdict.OVER_BUDGET,
                               reason="its training step took 90 s", evidence={"candidate_s": 90.0,
                                                                              "incumbent_s": 63.0}))
    context = build_context(folder)
    flagged = {row["id"]: row for row in context["flagged"]}
    assert flagged["e0001"]["evidence"] == {"reported": 0.5, "measured": 3.79, "seed": 1000}
    assert flagged["e0002"]["evidence"] == {"candidate_s": 90.0, "incumbent_s": 63.0}
    page = write_report(folder).html.read_text()
    assert "Flagged candidates" in page and "misreported" in page and "over_budget" in page
    assert "incumbent s" in page and "3.7900" in page
    from io import StringIO

    from rich.console import Console

    from agent.cli.display import print_status
    out = StringIO()
    print_status(Console(file=out, width=200), folder, "val_bpb")
    text = out.getvalue()
    assert "flagged, never kept: 2 (e0001 misreported, e0002 over_budget)" in text
    assert "metric: measured by the evaluation step" in text


def test_a_prediction_says_its_sign_beside_an_effect_that_says_its_own(tmp_path):
    # effect is positive = better; a prediction is the metric's raw change, so for a metric
    # minimized an expected gain reads negative: the page says so wherever both are shown
    from agent.review.report import render

    page = html.unescape(render(build_context(synthetic_night(tmp_path / "n", experiments=6))))
    assert "effect is the improvement over the incumbent (positive = better)" in page
    assert "prediction is the pre-registered change in val_bpb (candidate − incumbent, negative = better)" in page
    assert ">prediction (Δ)</th>" in page
    assert "val_bpb change (candidate − incumbent) " in page and "measured change " in page
