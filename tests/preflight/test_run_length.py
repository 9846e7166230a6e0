"""agent.preflight.run_length: a run's length estimated from its progress lines as they come,
on the harness's clock, and when that estimate is clear enough to stop the run."""
from agent.preflight.run_length import RunLengthWatch, duration, length_fix
from agent.target.overrides import Flag, StepCount

MAX_ITERS = StepCount(2000, "max_iters", Flag("max_iters", "2000", "--max_iters=2000"), None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def iterations(watch: RunLengthWatch, clock: Clock, start: float, seconds_each: float, steps: range) -> None:
    clock.now = start
    for step in steps:
        watch.feed(f"iter {step}: loss 4.0000, time {seconds_each * 1000:.2f}ms, mfu 0.01%")
        clock.now += seconds_each


def test_the_whole_run_is_estimated_from_the_steps_timed_after_the_first_line():
    clock = Clock()
    watch = RunLengthWatch(deadline_s=420, steps=MAX_ITERS, target="config.py", clock=clock)
    iterations(watch, clock, 12.0, 0.09, range(0, 300))   # startup and a first eval: 12 s
    estimate = watch.estimate
    assert estimate.unit == "iteration" and estimate.steps == 2000
    assert abs(estimate.seconds_per_step - 0.09) < 1e-6
    assert abs(estimate.whole_s - (12.0 + 2000 * 0.09)) < 0.2 and not watch.hopeless
    assert estimate.sentence(300) == ("at 90 ms per iteration, 2000 iterations take about 3.2 min "
                                      "(--max_iters=2000 in command); your budget is 300 s")


def test_a_moment_of_load_does_not_stop_a_run_but_a_clear_case_does():
    """Three slow iterations in 2.4 s (a busy moment) say nothing against a 420 s deadline;
    8.2 s iterations over a minute do: 2000 of them take 4.6 h."""
    clock = Clock()
    busy = RunLengthWatch(deadline_s=420, steps=MAX_ITERS, target="c.py", clock=clock)
    iterations(busy, clock, 12.0, 0.8, range(0, 4))
    assert busy.estimate is None and not busy.hopeless
    slow = RunLengthWatch(deadline_s=420, steps=MAX_ITERS, target="c.py", clock=clock)
    iterations(slow, clock, 100.0, 8.2, range(0, 10))
    assert slow.hopeless
    assert slow.estimate.sentence(300).startswith("at 8.2 s per iteration, 2000 iterations take about 4.6 h")


def test_a_script_given_the_budget_is_never_stopped_and_a_bar_gives_its_own_total():
    clock = Clock()
    told = RunLengthWatch(deadline_s=90, steps=MAX_ITERS, target="c.py", told_budget=True, clock=clock)
    iterations(told, clock, 1.0, 1.0, range(0, 60))
    assert told.estimate is not None and not told.hopeless
    bar = RunLengthWatch(deadline_s=90, steps=None, target="c.py", clock=clock)
    clock.now = 0.0
    for done in range(0, 40, 4):
        bar.feed(f" {done}%|##   | {done}/300 [00:{done:02d}<01:00,  1.00it/s]")
        clock.now += 4.0
    assert bar.estimate.steps == 300 and bar.estimate.origin == "the run's progress bar"
    assert bar.estimate.unit == "step" and bar.hopeless


def test_the_fix_names_the_scripts_own_flag_and_the_flags_that_share_its_value():
    clock = Clock()
    watch = RunLengthWatch(deadline_s=420, steps=MAX_ITERS, target="c.py", clock=clock)
    iterations(watch, clock, 100.0, 8.2, range(0, 10))
    fix = length_fix(watch.estimate, MAX_ITERS, "python train.py --max_iters=2000 --lr_decay_iters=2000", 300)
    assert fix.startswith("give a run that long: budget: 5.5h in program.md; or take fewer iterations: "
                          "--max_iters=2000 in command down to about 19 (what fits in 300 s at this pace), "
                          "and --lr_decay_iters=2000 with it")
    on_line = StepCount(5000, "max_iters", None, 28)
    assert "max_iters = 5000 (the target's line 28) down to about" in length_fix(watch.estimate, on_line, "", 300)


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (0.085, 8.2, 42, 190, 1400, 16400)] == \
        ["85 ms", "8.2 s", "42 s", "3.2 min", "23 min", "4.6 h"]
