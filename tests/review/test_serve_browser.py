"""The live page in a real browser (Debian's chromium, driven by selenium through the system
chromedriver), beside a real night: `nightshift run --serve` with a scripted researcher and a
sleep-paced toy script that prints the bundled train.py's progress lines.

Without a reload, the page must show a new experiment and a new run appear, a run's curve
grow, and an experiment's view (its diff) open on a click; it loads nothing but from its own
server. Screenshots go to the test artifacts folder ($NIGHTSHIFT_ARTIFACTS, else
test-artifacts/ at the project root): serve.png (the page with runs in flight) and
serve-experiment.png (an experiment's view); docs/serve.png is a copy of the first."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loop_helpers import PROJECT, cli_env, make_repo
from tests.needs import needs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, needs("browser")]
ARTIFACTS = Path(os.environ.get("NIGHTSHIFT_ARTIFACTS", PROJECT / "test-artifacts"))

TOY = """import json, os, random, time

LEVEL = 1.0    # the score's level: lower is better
STEP_S = 0.2   # seconds per printed step

seed = int(os.environ["NIGHTSHIFT_SEED"])
budget = float(os.environ["NIGHTSHIFT_BUDGET_S"])
rng = random.Random(seed)
start = time.time()
step = 0
while time.time() - start < budget:
    step += 1
    loss = LEVEL * (2.0 + 3.0 / step) + rng.gauss(0, 0.01)
    print(f"step {step} | loss {loss:.4f} | elapsed {time.time() - start:.1f}s", flush=True)
    time.sleep(STEP_S)
score = LEVEL + rng.gauss(0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as f:
    json.dump({"score": score}, f)
print("score:", score)
"""

PROGRAM = """---
target: train.py
protected: []
command: python train.py
prepare: null
metric: score
direction: minimize
budget: 3s
grace: 60s
sandbox: local
researcher: scripted
seeds: {baseline: 2, screen: 1, max: 2}
---
A sleep-paced toy that prints progress lines like train.py's.
"""

SCRIPT = [{"replace": ["LEVEL = 1.0 ", "LEVEL = 0.7 "], "description": "lower the level",
           "hypothesis": "a lower level gives a lower score"},
          {"replace": ["STEP_S = 0.2 ", "STEP_S = 0.25 "], "description": "slower steps"}]


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1500", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def wait_for(what, check, timeout=120.0, every=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def cards(driver) -> dict[str, int]:
    """run id -> points drawn in its curve, for every run card on the page now."""
    return driver.execute_script(
        "var out = {}; document.querySelectorAll('#inflight svg[data-run]').forEach(function (s) {"
        " out[s.getAttribute('data-run')] = parseInt(s.getAttribute('data-points'), 10); }); return out;")


def text_of(driver, selector: str) -> str:
    """The text of the first element matching `selector` now ("" if none): read in one
    script, since the page swaps its parts as the night goes on."""
    return driver.execute_script("var e = document.querySelector(arguments[0]);"
                                 " return e ? e.innerText : '';", selector)


def rows(driver) -> list[str]:
    return driver.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('#experiments tbody tr'),"
        " function (r) { return r.cells[0].textContent.trim(); });")


def test_a_night_watched_live_in_chromium(tmp_path):
    repo = make_repo(tmp_path / "repo", {"program.md": PROGRAM, "train.py": TOY})
    (tmp_path / "proposals.json").write_text(json.dumps(SCRIPT))
    env = {**cli_env(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "SE_OFFLINE": "true"}
    night = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", "--tag", "dec01", "--max-experiments", "2",
         "--script", str(tmp_path / "proposals.json"), "--serve", "--serve-port", "0"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    printed: list[str] = []
    driver = None
    try:
        url = None
        while url is None:
            line = night.stdout.readline()
            assert line, "the night ended before it printed its page:\n" + "".join(printed)
            printed.append(line)
            found = re.search(r"page: (http://127\.0\.0\.1:\d+/t/dec01/)", line)
            url = found.group(1) if found else None
        driver = browser(tmp_path / "profile")
        driver.get(url)
        driver.execute_script("window.__sameDocument = 'yes';")   # gone if the page reloads
        wait_for("the stream to connect", lambda: "connected" in driver.find_element("id", "livebar").get_attribute("class"))

        # a run in flight, and its curve growing
        first = wait_for("a run in flight", lambda: {k: v for k, v in cards(driver).items() if v >= 2})
        run_id, points = next(iter(first.items()))
        wait_for(f"the curve of {run_id} to grow",
                 lambda: cards(driver).get(run_id, 0) > points or run_id not in cards(driver))
        grown = cards(driver).get(run_id)
        assert grown is None or grown > points
        seen_runs = set(cards(driver))

        # a new experiment, then a new run, without a reload
        assert "e0001" not in rows(driver)
        wait_for("e0001 in the table", lambda: "e0001" in rows(driver), timeout=180)
        wait_for("a run that was not there before", lambda: set(cards(driver)) - seen_runs, timeout=180)
        assert driver.execute_script("return window.__sameDocument") == "yes"

        # one experiment's view: its diff, its hypothesis, the decision once made
        driver.find_element("css selector", 'a.xlink[href="#x-e0001"]').click()
        view = wait_for("the view of e0001", lambda: text_of(driver, "#liveviews .xview.open"))
        assert "+LEVEL = 0.7" in view and "-LEVEL = 1.0" in view
        assert "a lower level gives a lower score" in view
        text = wait_for("e0001's decision in its view", lambda: (lambda t: t if t and "not decided yet" not in t else "")(
            text_of(driver, "#liveviews .xview.open")), timeout=180)
        assert re.search(r"95% interval \[[-+]\d", text), text
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "serve-experiment.png"))
        driver.execute_script("document.querySelector('#liveviews .xclose').click();")
        assert not driver.find_elements("css selector", "#liveviews .xview")
        try:   # the page as a person watches it: a decision made, the next runs in flight
            wait_for("a run in flight after the decision", lambda: cards(driver), timeout=30)
        except AssertionError:
            pass   # the night may be over on a fast machine: the picture is taken anyway
        driver.execute_script("window.scrollTo(0, 0);")
        driver.save_screenshot(str(ARTIFACTS / "serve.png"))

        origin = url.split("/t/")[0]
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map(function (r) { return r.name; });")
        assert fetched and all(name.startswith(origin + "/") for name in fetched), fetched
        assert driver.execute_script("return window.__sameDocument") == "yes"
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        if driver is not None:
            driver.quit()
        try:
            out, _ = night.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            night.kill()
            out, _ = night.communicate()
        printed.append(out or "")
    assert night.returncode == 0, "".join(printed)
    kinds = [json.loads(line)["event"] for line in
             (repo / "results" / "dec01" / "ledger.jsonl").read_text().splitlines()]
    # the researcher's two proposals were announced and answered (what "being written" shows)
    assert kinds.count("proposal_asked") == kinds.count("proposal_ready") >= 2
