"""What the live page costs the machine a night runs on, as a night grows.

    python -m benchmarks.overhead.serve_cost [--experiments 100 500 2000] [--runs 8] [--browsers 4]

For synthetic nights of each size (tests/ledger_factory.py), prints:
- render s: one build of the report's context and the page (what a ledger change costs the
  server once, however many browsers watch; the server renders at most once per ledger
  version and no more often than three times this, so it uses at most a quarter of a core);
- page KB: what a browser fetches after each change;
- live ms: one look at the runs in flight (`--runs` of them, each with a 2,000-line log read
  incrementally after the first look), the work of each server-sent event;
- event KB: the size of one event;
- sse s: wall time for `--browsers` clients to each receive 3 events from a real server.
"""
from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from pathlib import Path


from agent.preflight.lock import TagLock
from agent.record.events import RunStarted
from agent.record.ledger import Ledger
from agent.review.serve.app import Site
from agent.review.serve.server import prepare
from agent.review.serve.tagview import TagView
from tests.ledger_factory import synthetic_night


def with_runs_in_flight(tag: Path, runs: int) -> None:
    ledger = Ledger(tag)
    for i in range(runs):
        run_id = f"live{i}"
        ledger.append(RunStarted(run_id=run_id, commit="f" * 40, seed=i, role="reference",
                                 worker=i, budget_s=600.0))
        log = tag / "runs" / run_id / "log.txt"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(f"step {s} | loss {3 - s / 1000:.4f} | lr 1.0e-03 | elapsed {s / 10:.1f}s\n"
                               for s in range(1, 2001)))


def sse(port: int, tag: str, browsers: int, events: int = 3) -> float:
    def one() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", f"/t/{tag}/events")
        response = conn.getresponse()
        seen = 0
        while seen < events:
            seen += response.fp.readline().startswith(b"data: ")
        conn.close()
    began = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(browsers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--browsers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:   # imports and template compilation, once
        TagView("warm", synthetic_night(Path(tmp) / "warm", experiments=30)).page()   # scipy too
    print(f"{'experiments':>11} {'render s':>9} {'page KB':>8} {'live ms':>8} {'event KB':>9} {'sse s':>6}")
    for n in args.experiments:
        with tempfile.TemporaryDirectory() as tmp:
            results = Path(tmp) / "results"
            tag = synthetic_night(results / "bench", experiments=n, stop=False)
            with_runs_in_flight(tag, args.runs)
            lock = TagLock.acquire(tag, "bench")
            try:
                view = TagView("bench", tag)
                began = time.perf_counter()
                page = view.page()
                render_s = time.perf_counter() - began
                view.live()                          # the first look reads every log
                time.sleep(0.6)
                began = time.perf_counter()
                live = view.live()
                live_ms = 1000 * (time.perf_counter() - began)
                serving = prepare(Site(results=results), "127.0.0.1", 0).start_in_thread()
                try:
                    sse_s = sse(serving.port, "bench", args.browsers)
                finally:
                    serving.stop()
            finally:
                lock.release()
            event_kb = len(json.dumps({"version": live["version"], "live": live})) / 1024
            print(f"{n:>11} {render_s:>9.2f} {len(page.html) / 1024:>8.0f} {live_ms:>8.1f} "
                  f"{event_kb:>9.1f} {sse_s:>6.2f}")


if __name__ == "__main__":
    main()
