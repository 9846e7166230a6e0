"""A real loop never re-reads its ledger, yet its state is at every step what a fresh fold
of the file gives: the kept fold and the pure one cannot drift apart."""
from agent.cli.display import RichObserver
from agent.night.loop import StopRules
from agent.night import session as session_module
from agent.night.session import build_session
from agent.program import load_program
from agent.record.ledger import Ledger, read_events
from agent.record.state import fold
from tests.loop_helpers import make_repo
from tests.night.test_keep_rule_loop import NOISE_SCRIPT, PROGRAM


def test_the_kept_state_equals_a_fresh_fold_after_every_event(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTSHIFT_DATA_ROOT", str(tmp_path / "data"))
    repo = make_repo(tmp_path / "user", {"noise.py": NOISE_SCRIPT, "program.md": PROGRAM})
    program = load_program(repo / "program.md", {"seeds.baseline": 2, "seeds.max": 3})
    checked = []
    append = Ledger.append

    def append_and_compare(self, event):
        recorded = append(self, event)
        assert self.state == fold(read_events(self.path)), f"drifted after {event.kind}"
        checked.append(event.kind)
        return recorded

    monkeypatch.setattr(Ledger, "append", append_and_compare)
    reads = []
    apply_range = Ledger._apply_range
    monkeypatch.setattr(Ledger, "_apply_range",
                        lambda self, start, stop: (reads.append(stop - start), apply_range(self, start, stop)))
    snapshot = session_module.read_snapshot      # how a resume reads the file, before its lock
    monkeypatch.setattr(session_module, "read_snapshot",
                        lambda results: ((results / "ledger.jsonl").exists() and reads.append(results))
                        or snapshot(results))
    for invocation in range(2):   # a night, then its resume (which reads the file once)
        session = build_session(program, "inc", researcher="optuna", sandbox="local",
                                observer=RichObserver())
        session.loop.run(StopRules(max_experiments=3))
        session.close()
    kinds = set(checked)
    assert {"loop_started", "loop_resumed", "run_started", "run_finished", "experiment_proposed",
            "decision", "loop_stopped"} <= kinds
    assert len(reads) == 1   # the resume's one read of the file; never once per experiment
