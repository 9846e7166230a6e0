"""`nightshift serve` keeps its promises: loopback only unless asked, a token when bound
elsewhere, nothing of the environment in any response, no path outside the tag's files, no
write to the results folder, several browsers at once, and a ledger appended (a torn last line
included) while it reads.

The server runs for real (uvicorn on a socket of this machine's loopback); requests go through
http.client, which sends a path exactly as written (no `..` folded away)."""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.preflight.lock import TagLock
from agent.record.events import ExperimentProposed, ProposalAsked, RunStarted
from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from agent.review.serve.app import Site
from agent.review.serve.files import served_file
from agent.review.serve.server import prepare
from agent.review.serve.tail import LedgerTail
from tests.ledger_factory import synthetic_night
from tests.loop_helpers import PROJECT

CANARIES = {"ANTHROPIC_API_KEY": "sk-ant-canary-0123456789abcdef",
            "OPENAI_API_KEY": "sk-openai-canary-fedcba9876543210",
            "NIGHTSHIFT_TEST_CANARY": "environment-canary-5f1e2d"}


def make_results(root: Path, experiments: int = 12) -> Path:
    """A repository folder with program.md and a synthetic night `n1`: some runs' logs, a
    transcript, a run still in flight with progress in its log, a symlink pointing out."""
    (root / "program.md").parent.mkdir(parents=True, exist_ok=True)
    (root / "program.md").write_text("---\nmetric: val_bpb\n---\nprose\n")
    tag = synthetic_night(root / "results" / "n1", experiments=experiments, stop=False)
    state = fold(read_events(tag))
    for run in state.runs[:6]:
        folder = tag / "runs" / run.run_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "log.txt").write_text("step 1 | loss 3.0 | elapsed 1.0s\nstep 2 | loss 2.5 | elapsed 2.0s\n")
    (tag / "researcher" / "transcripts").mkdir(parents=True)
    (tag / "researcher" / "transcripts" / "0001.json").write_text('{"turns": []}')
    (tag / "worktree").mkdir()
    (tag / "worktree" / "secret.txt").write_text("the user's own file")
    evil = tag / "runs" / "evil"
    evil.mkdir()
    (evil / "log.txt").symlink_to(root / "program.md")
    return tag


def get(port: int, path: str, headers: dict | None = None, host: str = "127.0.0.1",
        timeout: float = 30) -> tuple[int, dict, str]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    body = response.read().decode("utf-8", errors="replace")
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def first_events(port: int, path: str, count: int, host: str = "127.0.0.1") -> list[dict]:
    """The first `count` server-sent events of `path`, decoded."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    found = []
    while len(found) < count:
        line = response.fp.readline().decode()
        if line.startswith("data: "):
            found.append(json.loads(line[6:]))
    conn.close()
    return found


@pytest.fixture()
def served(tmp_path):
    """An in-process server over a synthetic night, on loopback; stopped after the test."""
    tag = make_results(tmp_path / "repo")
    serving = prepare(Site(results=tmp_path / "repo" / "results"), "127.0.0.1", 0).start_in_thread()
    yield {"port": serving.port, "tag": tag, "root": tmp_path / "repo"}
    serving.stop()


def start_cli(root: Path, *args: str, env_extra: dict | None = None):
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--port", "0", *args],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    found = re.search(r"serving (http://(\S+?):(\d+)/(\S*))", line)
    assert found, line + proc.stdout.read() if proc.poll() is not None else line
    return proc, found.group(2).strip("[]"), int(found.group(3)), found.group(1)


def stop_cli(proc) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def listening(port: int) -> list[str]:
    """The local addresses listening on `port`, from the kernel's tables (/proc/net/tcp*)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:   # 0A: LISTEN
                if len(address) == 8:
                    found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
                else:
                    found.append(address)
    return found


def test_it_binds_only_loopback_unless_asked(tmp_path):
    make_results(tmp_path / "repo")
    proc, host, port, url = start_cli(tmp_path / "repo")
    try:
        assert host == "127.0.0.1" and "token" not in url
        assert listening(port) == ["127.0.0.1"]
        assert get(port, "/t/n1/")[0] == 200
        # a page of another site reaching it through a name pointed at 127.0.0.1: refused
        assert get(port, "/t/n1/", headers={"Host": "attacker.example"})[0] == 400
    finally:
        stop_cli(proc)


def test_another_address_needs_the_token_printed_at_start(tmp_path):
    make_results(tmp_path / "repo")
    proc, host, port, url = start_cli(tmp_path / "repo", "--host", "127.0.0.2")
    try:
        assert host == "127.0.0.2" and listening(port) == ["127.0.0.2"]
        token = re.search(r"\?token=([\w-]+)", url).group(1)
        assert len(token) >= 24
        for path in ("/", "/t/n1/", "/t/n1/live.json", "/t/n1/x/e0001", "/t/n1/events",
                     "/t/n1/files/researcher/transcripts/0001.json"):
            status, _, body = get(port, path, host=host)
            assert status == 401 and "token" in body, path
            assert get(port, path + "?token=wrong" + token[5:], host=host)[0] == 401
        status, headers, _ = get(port, f"/t/n1/?token={token}", host=host)
        assert status == 200 and f"nightshift_token={token}" in headers["set-cookie"]
        assert "httponly" in headers["set-cookie"].lower() and "samesite=strict" in headers["set-cookie"].lower()
        assert get(port, "/t/n1/live.json", {"Cookie": f"nightshift_token={token}"}, host=host)[0] == 200
        assert get(port, "/t/n1/live.json", {"Authorization": f"Bearer {token}"}, host=host)[0] == 200
    finally:
        stop_cli(proc)


def test_no_response_holds_the_api_key_or_the_environment(tmp_path):
    tag = make_results(tmp_path / "repo")
    lock = TagLock.acquire(tag, "n1")   # a live holder: runs in flight are shown
    ledger = Ledger(tag)
    ledger.append(RunStarted(run_id="flying", commit="f" * 40, seed=7, role="reference", budget_s=60.0))
    ledger.append(ProposalAsked(request_id="q1", researcher="claude", incumbent="f" * 40))
    (tag / "runs" / "flying").mkdir(parents=True)
    (tag / "runs" / "flying" / "log.txt").write_text("step 5 | loss 2.2 | elapsed 3.0s\n")
    proc, host, port, _ = start_cli(tmp_path / "repo", env_extra=CANARIES)
    try:
        bodies = []
        for path in ("/", "/t/n1/", "/t/n1/live.json", "/t/nope/", "/t/n1/x/e9999",
                     "/t/n1/files/worktree/secret.txt", "/t/n1/files/lock"):
            bodies.append(get(port, path)[2])
        page = bodies[1]
        for experiment in sorted(set(re.findall(r'href="#x-(e\d+)"', page))):
            status, _, body = get(port, f"/t/n1/x/{experiment}")
            assert status == 200
            bodies.append(body)
            for link in re.findall(r'href="(/t/n1/files/[^"]+)"', body):
                bodies.append(get(port, link)[2])
        live = json.loads(bodies[2])
        assert [r["run_id"] for r in live["runs"]] == ["flying"]
        assert live["runs"][0]["curve"]["points"] == [[5.0, 2.2]] and live["proposals"][0]["researcher"] == "claude"
        bodies += [json.dumps(e) for e in first_events(port, "/t/n1/events", 2)]
        assert len(bodies) > 10
        for body in bodies:
            for name, value in CANARIES.items():
                assert value not in body, f"{name} leaked"
            assert str(Path.home()) + "/" not in body or "results" in body   # no home listing
        assert "the user's own file" not in "".join(bodies)
    finally:
        stop_cli(proc)
        lock.release()


@pytest.mark.parametrize("path", [
    "/t/n1/files/../../../../etc/passwd", "/t/n1/files/%2e%2e/%2e%2e/program.md",
    "/t/n1/files/runs/x/../../../../program.md", "/t/n1/files//etc/passwd",
    "/t/n1/files/%2Fetc%2Fpasswd", "/t/n1/files/worktree/secret.txt", "/t/n1/files/lock",
    "/t/n1/files/ledger.jsonl", "/t/n1/files/runs/evil/log.txt", "/t/n1/files/runs/./x/log.txt",
    "/t/..%2F..%2Fetc/files/passwd", "/t/../files/program.md",
])
def test_a_path_outside_the_tags_files_is_refused(served, path):
    status, _, body = get(served["port"], path)
    assert status in (403, 404), (path, status)
    assert "metric: val_bpb" not in body and "root:" not in body and "the user's own file" not in body


def test_the_files_the_page_links_to_are_served(served):
    state = fold(read_events(served["tag"]))
    status, headers, body = get(served["port"], f"/t/n1/files/runs/{state.runs[0].run_id}/log.txt")
    assert status == 200 and "step 2 | loss 2.5" in body and headers["content-type"].startswith("text/plain")
    assert get(served["port"], "/t/n1/files/researcher/transcripts/0001.json")[2] == '{"turns": []}'
    assert served_file(served["tag"], "runs/evil/log.txt") is None   # the link points out


def test_every_response_forbids_other_origins_and_caching(served):
    status, headers, page = get(served["port"], "/t/n1/")
    assert status == 200
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert headers["cache-control"] == "no-store" and headers["x-content-type-options"] == "nosniff"
    assert not re.search(r'(src|href)="(https?:)?//', page), "the page must load nothing from elsewhere"


def test_it_writes_nothing_and_survives_a_ledger_appended_while_it_reads(served):
    tag, port = served["tag"], served["port"]
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in tag.rglob("*") if p.is_file()}
    version = get(port, "/t/n1/live.json")[2]
    version = json.loads(version)["version"]
    line = json.dumps(ExperimentProposed(id="e9999", commit="9" * 40, parent="0" * 40,
                                         description="written in two halves").to_dict()) + "\n"
    with open(tag / "ledger.jsonl", "ab") as handle:          # a torn last line
        handle.write(line[:40].encode())
    status, _, page = get(port, "/t/n1/")
    assert status == 200 and "written in two halves" not in page
    assert json.loads(get(port, "/t/n1/live.json")[2])["version"] == version
    after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in tag.rglob("*") if p.is_file()}
    assert after == {**before, tag / "ledger.jsonl": after[tag / "ledger.jsonl"]}
    assert (tag / "ledger.jsonl").read_bytes().endswith(line[:40].encode())   # not cut by the reader
    with open(tag / "ledger.jsonl", "ab") as handle:
        handle.write(line[40:].encode())
    deadline = time.monotonic() + 20
    while "written in two halves" not in get(port, "/t/n1/")[2]:
        assert time.monotonic() < deadline, "the completed line never showed"
        time.sleep(0.2)
    assert get(port, "/t/n1/x/e9999")[0] == 200


def test_several_browsers_at_once_while_the_night_writes(served):
    tag, port = served["tag"], served["port"]
    ledger = Ledger(tag)
    errors: list[str] = []
    stop = threading.Event()

    def writer():
        for i in range(60):
            ledger.append(RunStarted(run_id=f"w{i}", commit="a" * 40, seed=i, role="reference"))
            time.sleep(0.02)
        stop.set()

    def browser(n: int):
        try:
            while not stop.is_set():
                for path in ("/t/n1/", "/t/n1/live.json", "/"):
                    status = get(port, path)[0]
                    if status != 200:
                        errors.append(f"{path}: {status}")
            events = first_events(port, "/t/n1/events", 2)
            if not events or "live" not in events[0]:
                errors.append(f"browser {n}: no event")
        except Exception as error:   # noqa: BLE001 - collected and asserted below
            errors.append(f"browser {n}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=browser, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    tail = LedgerTail(tag)
    tail.poll()
    assert fold(tail.events).in_flight.keys() == fold(read_events(tag)).in_flight.keys()


def test_the_tail_reads_complete_lines_and_starts_over_when_the_file_is_replaced(tmp_path):
    tag = synthetic_night(tmp_path / "t", experiments=3)
    tail = LedgerTail(tag)
    assert len(tail.poll()) == len(list(read_events(tag))) and tail.version == 1
    assert tail.poll() == [] and tail.version == 1
    text = (tag / "ledger.jsonl").read_text()
    replaced = tag / "ledger.new"
    replaced.write_text(text.splitlines(True)[0])
    replaced.replace(tag / "ledger.jsonl")            # a tag started over
    assert len(tail.poll()) == 1 and tail.restarts == 1 and tail.version == 2


def test_an_ablation_in_flight_shows_on_the_page_and_a_dead_nights_run_does_not(served):
    from agent.record.events import AblationPlanned

    tag, port = served["tag"], served["port"]
    Ledger(tag).append(RunStarted(run_id="ghost", commit="e" * 40, seed=3, role="reference"))
    time.sleep(1.1)   # the lock's time is to the second: the ghost started before it
    lock = TagLock.acquire(tag, "n1")
    try:
        Ledger(tag).append(AblationPlanned(
            ablation_id="a1", incumbent="c" * 40, base="b" * 40, budget_s=30.0, seeds=(700000,),
            variants=[{"experiment": "e0001", "variant_commit": "d" * 40, "status": "planned"}]))
        Ledger(tag / "ablations" / "a1").append(RunStarted(
            run_id="ab1", commit="d" * 40, seed=700000, role="ablation", experiment="e0001", budget_s=30.0))
        log = tag / "ablations" / "a1" / "runs" / "ab1" / "log.txt"
        log.parent.mkdir(parents=True)
        log.write_text("step 1 | loss 3.1 | elapsed 1.0s\n")
        (run,) = json.loads(get(port, "/t/n1/live.json")[2])["runs"]
        assert run["source"] == "ablation a1" and run["what"] == "the incumbent without e0001"
        assert run["curve"]["points"] == [[1.0, 3.1]] and 0 < run["left_s"] <= 30
        with open(log, "a") as handle:
            handle.write("step 2 | loss 2.9 | elapsed 2.0s\nstep 3 | loss 2.")   # the last line unfinished
        time.sleep(0.6)
        (run,) = json.loads(get(port, "/t/n1/live.json")[2])["runs"]
        assert run["curve"]["points"] == [[1.0, 3.1], [2.0, 2.9]]
        status, _, log_text = get(port, "/t/n1/files/ablations/a1/runs/ab1/log.txt")
        assert status == 200 and "loss 2.9" in log_text
        deadline = time.monotonic() + 20
        while "0 of 3 runs landed" not in get(port, "/t/n1/")[2]:
            assert time.monotonic() < deadline, "the ablation panel never showed the running ablation"
            time.sleep(0.2)
    finally:
        lock.release()
