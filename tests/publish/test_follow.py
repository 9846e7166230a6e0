"""The follower's promise to every sink: a receiver's refusal passes one event over (one that
is down holds the rest in order: tests/publish/test_mlflow.py), and a fault on this side (an
SDK that failed to import) stops the sink where it is, so the next follower of the ledger
delivers from that event."""
from agent.publish.follow import Follower
from agent.record.events import LoopStarted, LoopStopped
from agent.record.ledger import Ledger
from tests.publish.test_hooks import kept, proposed


class Recorder:
    """A sink that records what reached it; `trouble` says what each kind of event meets."""
    name = "recorder"

    def __init__(self, trouble=None):
        self.got, self.trouble, self.finished = [], dict(trouble or {}), False

    def deliver(self, event, state):
        problem = self.trouble.get(event.kind)
        if problem == "fault":
            raise AttributeError("partially initialized module 'sdk' has no attribute 'errors'")
        if problem == "refused":
            return f"refused {event.kind}"
        self.got.append(event.kind if event.kind != "decision" else f"decision {event.id}")
        return None

    def finish(self):
        self.finished = True


def a_night_through(results, sink):
    """A night of two kept experiments appended while `sink` is followed; what was said."""
    said = []
    follower = Follower(results, sink, said.append).start()
    ledger = Ledger(results)
    ledger.append(LoopStarted(tag="dec07", base_commit="base0000"))
    proposed(ledger, "e0001", "cand0001")
    kept(ledger, "e0001", "cand0001")
    proposed(ledger, "e0002", "cand0002")
    kept(ledger, "e0002", "cand0002", incumbent="cand0001")
    ledger.append(LoopStopped(reason="reached --max-experiments 2"))
    follower.close(10)
    return said


def test_a_fault_on_this_side_stops_the_sink_and_the_next_follower_delivers_from_there(tmp_path):
    results = tmp_path / "results" / "dec07"
    faulty = Recorder({"experiment_proposed": "fault"})
    said = a_night_through(results, faulty)
    assert faulty.got == ["loop_started"] and not faulty.finished
    assert any("stopped at the ledger's experiment_proposed event: AttributeError" in line for line in said), said
    assert any("not everything was delivered" in line for line in said), said

    again = Recorder()                    # the night resumes (or is exported) with the fault gone
    Follower(results, again, said.append).start().close(10)
    assert again.got == ["experiment_proposed", "decision e0001", "experiment_proposed", "decision e0002",
                         "loop_stopped"]
    assert again.finished


def test_a_refusal_passes_its_event_over_and_is_said_once(tmp_path):
    picky = Recorder({"experiment_proposed": "refused"})
    said = a_night_through(tmp_path / "results" / "dec07", picky)
    assert picky.got == ["loop_started", "decision e0001", "decision e0002", "loop_stopped"] and picky.finished
    assert said == ["recorder: refused experiment_proposed; the night goes on"]
