"""The progress reader: every shape of progress line it claims to read, and what it ignores."""
import math

from sandbox.progress import ProgressReader

NANOGPT = r"iter (?P<iter>\d+): loss (?P<train_loss>[0-9.]+), time (?P<ms_per_iter>[0-9.]+)ms"


def test_bundled_step_line():
    point = ProgressReader().feed("step 300 | loss 2.4512 | lr 1.0e-02 | grad_norm 0.512 | "
                                  "update_ratio 3.1e-03 | elapsed 14.2s")
    assert (point.step, point.loss, point.elapsed_s) == (300, 2.4512, 14.2)
    assert point.values["update_ratio"] == 3.1e-3 and point.total_steps is None


def test_metrics_pattern_names_the_figures():
    point = ProgressReader(NANOGPT).feed("iter 40: loss 2.8765, time 71.30ms, mfu -100.00%")
    assert (point.step, point.loss, point.elapsed_s) == (40, 2.8765, None)
    assert point.values["ms_per_iter"] == 71.3


def test_tqdm_bar_gives_the_total_and_its_last_update_counts():
    line = " 5%|▌    | 100/2000 [00:08<02:30, 12.6it/s]\r 6%|▌    | 120/2000 [01:10<02:30, 12.6it/s]"
    point = ProgressReader().feed(line)
    assert (point.step, point.total_steps, point.elapsed_s) == (120, 2000, 70.0)
    assert point.values["steps_per_s"] == 12.6
    slow = ProgressReader().feed("  1%|          | 3/300 [00:24<40:00,  8.20s/it]")
    assert math.isclose(slow.values["steps_per_s"], 1 / 8.2)


def test_trainer_log_dict():
    point = ProgressReader().feed("{'loss': 2.1034, 'grad_norm': 0.83, 'learning_rate': 5e-05, 'epoch': 0.5}")
    assert point.loss == 2.1034 and point.values["epoch"] == 0.5 and point.step is None


def test_a_trainer_log_dict_of_strings_takes_its_step_from_the_bar():
    # transformers 4.4x and later print the numbers as strings; the dict names no step, the
    # Trainer's bar counts them
    reader = ProgressReader()
    reader.feed(" 19%|█▉        | 19/98 [00:01<00:04, 16.22it/s]")
    point = reader.feed("{'loss': '4.845', 'grad_norm': '2.113', 'learning_rate': '0.0008977', 'epoch': '0.2041'}")
    assert (point.loss, point.step, point.total_steps) == (4.845, 19, 98)
    assert point.values["learning_rate"] == 0.0008977 and point.values["epoch"] == 0.2041
    # the summary at the end of training: train_loss is the whole run's mean, no point of it
    assert reader.feed("{'train_runtime': '3.181', 'train_loss': '3.567', 'epoch': '1'}") is None
    assert reader.feed("{'loss': 'high', 'epoch': '0.5'}") is None     # a string that is no number


def test_other_lines_are_not_progress():
    reader = ProgressReader(NANOGPT)
    for line in ("step 0: train loss 4.2, val loss 4.3", "hello", "", "{'eval_loss': 2.0}",
                 "{__import__('os').system('true'): 1, 'loss': 1}", "x" * 100_000):
        assert reader.feed(line) is None, line
    assert math.isnan(reader.feed("step 5 | loss nan").loss)   # a diverged run is still progress


def test_nanogpt_iteration_lines_without_a_pattern():
    point = ProgressReader().feed("iter 10: loss 2.3011, time 85.12ms, mfu 0.02%")
    assert (point.step, point.loss) == (10, 2.3011)
    assert point.values["time"] == 85.12 and point.values["mfu"] == 0.02


def test_a_pattern_naming_some_figures_keeps_the_lines_step():
    """examples/nanogpt's pattern takes ms_per_iter from iterations without an evaluation
    only; the step and loss still come from the iteration line itself."""
    pattern = (r"step (?P<iter>\d+): train loss (?P<train_loss>[0-9.]+)"
               r"|iter (?!(?:\d*(?:000|250|500|750)|0):)\d+: loss [0-9.]+, time (?P<ms_per_iter>[0-9.]+)ms")
    reader = ProgressReader(pattern)
    plain = reader.feed("iter 251: loss 2.1000, time 70.00ms, mfu 0.02%")
    assert (plain.step, plain.loss, plain.values["ms_per_iter"]) == (251, 2.1, 70.0)
    evaluated = reader.feed("iter 500: loss 2.0500, time 602.00ms, mfu 0.02%")
    assert evaluated.step == 500 and "ms_per_iter" not in evaluated.values
    assert reader.feed("step 500: train loss 2.0100, val loss 2.0900").step == 500


def test_a_message_written_over_a_bar_leaves_the_bar_readable():
    line = " 5%|▌    | 10/200 [00:08<02:30,  1.26it/s]\r     \r"
    assert ProgressReader().feed(line).total_steps == 200
    mixed = " 5%|▌    | 10/200 [00:08<02:30,  1.26it/s]\r{'loss': 2.5, 'epoch': 0.1}"
    assert ProgressReader().feed(mixed).loss == 2.5


def test_makemore_step_lines_with_a_figure_named_in_two_words():
    # karpathy/makemore prints `step N | loss X | step time Yms`: one figure, `step_time`,
    # which never stands for the step itself
    reader = ProgressReader(r"model #params: (?P<params>\d+)|step (?P<steps>\d+) train loss")
    point = reader.feed("step 120 | loss 2.3456 | step time 12.34ms")
    assert (point.step, point.loss, point.elapsed_s) == (120, 2.3456, None)
    assert point.values["step_time"] == 12.34
    assert reader.feed("step 500 train loss: 2.31 test loss: 2.35").loss is None
    assert ProgressReader().feed("step 3 | loss 2.0 | step | lr 1e-3") is None   # a name without a figure


def test_a_long_line_that_is_almost_a_step_line_is_refused_at_once():
    # 2000 `name value` pairs and a last one without a value: each space had two places in the
    # pattern, and 12 pairs took 10 s (a script's output is data, and the reader runs on the
    # worker's thread)
    import time
    started = time.monotonic()
    assert ProgressReader().feed("step 1 " + "| x 1 " * 2000 + "| y") is None
    assert ProgressReader().feed("step 1 " + "| x: 1 s " * 2000).values["x"] == 1.0
    assert time.monotonic() - started < 30.0   # a hang guard: the old pattern took ~4**2000 tries
