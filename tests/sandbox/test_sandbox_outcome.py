"""classify and CappedLog: the outcome rules every backend shares."""
from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.outcome import CappedLog, classify
from sandbox.protocol import Status


def judge(tmp_path, *, exit_code=0, log="", result=None, **flags):
    if result is not None:
        (tmp_path / "result.json").write_bytes(result)
    args = dict(timed_out=False, oom_killed=False, interrupted=False) | flags
    return classify(exit_code=exit_code, out_dir=tmp_path, log_tail=log, metric="val_bpb", **args)


def test_precedence_interrupted_timeout_oom_crash(tmp_path):
    assert judge(tmp_path, exit_code=-9, interrupted=True, timed_out=True)[0] == Status.INTERRUPTED
    assert judge(tmp_path, exit_code=-9, timed_out=True, oom_killed=True)[0] == Status.TIMEOUT
    assert judge(tmp_path, exit_code=-9, oom_killed=True)[0] == Status.OOM
    assert judge(tmp_path, exit_code=1, log="x\nMemoryError")[0] == Status.OOM
    assert judge(tmp_path, exit_code=1, log="torch.OutOfMemoryError: CUDA out of memory.")[0] == Status.OOM


def test_crash_reason_names_signal_and_last_error(tmp_path):
    status, _, _, reason = judge(tmp_path, exit_code=-11, log="Traceback\nKeyError: 'x'\nbye")
    assert status == Status.CRASH and "SIGSEGV" in reason and "KeyError: 'x'" in reason
    assert "exit code 137 (SIGKILL?)" in judge(tmp_path, exit_code=137)[3]


@pytest.mark.parametrize("raw, log, expected", [
    (b'{"val_bpb": 0.9}', "", (Status.OK, 0.9)),
    (b"not json", "---\nval_bpb: 0.8", (Status.OK, 0.8)),
    (b"[0.9]", "", (Status.NO_METRIC, None)),
    (None, "step: 3\nval_bpb: 0.7", (Status.OK, 0.7)),          # no --- : numbers only
    (None, "ValueError: boom", (Status.NO_METRIC, None)),
    (b'{"val_bpb": NaN}', "", (Status.BAD_METRIC, None)),
    (b'{"val_bpb": "fast"}', "", (Status.BAD_METRIC, None)),
    (b'{"val_bpb": true}', "", (Status.BAD_METRIC, None)),
    (None, "---\nval_bpb: inf", (Status.BAD_METRIC, None)),
])
def test_metric_sources_and_validity(tmp_path, raw, log, expected):
    status, value, _, _ = judge(tmp_path, log=log, result=raw)
    assert (status, value) == expected


def test_result_json_that_is_a_fifo_or_huge_is_ignored(tmp_path):
    import os
    os.mkfifo(tmp_path / "result.json")   # reading it would block forever
    assert judge(tmp_path, log="---\nval_bpb: 1")[:2] == (Status.OK, 1.0)
    os.remove(tmp_path / "result.json")
    assert judge(tmp_path, result=b'{"val_bpb": 1, "pad": "' + b"x" * 2_000_000 + b'"}')[0] == Status.NO_METRIC


def test_capped_log_keeps_head_and_tail_with_marker(tmp_path):
    lines: list[str] = []
    log = CappedLog(tmp_path / "log.txt", 1000, lines.append)
    for i in range(1000):
        log.write(f"line {i:04d}\n".encode())
    log.write(b"\xff end")
    log.close()
    text = (tmp_path / "log.txt").read_text(errors="replace")
    assert text.startswith("line 0000\n") and text.endswith("line 0999\n\ufffd end")
    assert f"[... {log.total_bytes - 1000} bytes elided ...]" in text
    assert len(lines) == 1001 and lines[-1] == "\ufffd end"
    assert log.tail(2) == "line 0999\n\ufffd end"


def test_capped_log_survives_a_callback_that_raises(tmp_path):
    def broken(_line: str) -> None:
        raise RuntimeError("display bug")

    log = CappedLog(tmp_path / "log.txt", 1000, broken)
    log.write(b"a\nb\n")
    log.close()
    assert isinstance(log.callback_error, RuntimeError) and log.tail() == "a\nb"


# -- the metric from the log (program.md's metric_pattern / metrics_pattern) ---------------

NANOGPT_LOG = ("step 0: train loss 4.2100, val loss 4.2200\n"
               "iter 10: loss 3.1000, time 21.50ms\n"
               "step 300: train loss 1.8800, val loss 2.0000\n")


def test_metric_pattern_takes_the_last_match_and_named_groups_add_figures(tmp_path):
    status, value, metrics, _ = classify(
        exit_code=0, timed_out=False, oom_killed=False, interrupted=False, out_dir=tmp_path,
        log_tail=NANOGPT_LOG, metric="val_loss", metric_pattern=r"val loss ([0-9.]+)",
        metrics_pattern=r"iter (?P<iter>\d+): loss (?P<train_loss>[0-9.]+), time (?P<ms_per_iter>[0-9.]+)ms")
    assert (status, value) == (Status.OK, 2.0)
    assert metrics == {"val_loss": 2.0, "iter": 10, "train_loss": 3.1, "ms_per_iter": 21.5}


def test_result_json_and_the_summary_win_over_the_pattern(tmp_path):
    args = dict(exit_code=0, timed_out=False, oom_killed=False, interrupted=False, out_dir=tmp_path,
                metric="val_loss", metric_pattern=r"val loss ([0-9.]+)")
    assert classify(log_tail=NANOGPT_LOG + "---\nval_loss: 1.5\n", **args)[1] == 1.5
    (tmp_path / "result.json").write_text('{"val_loss": 1.25}')
    assert classify(log_tail=NANOGPT_LOG + "---\nval_loss: 1.5\n", **args)[1] == 1.25


def test_a_captured_non_number_is_a_bad_metric(tmp_path):
    status, _, _, reason = classify(
        exit_code=0, timed_out=False, oom_killed=False, interrupted=False, out_dir=tmp_path,
        log_tail="val loss nan\n", metric="val_loss", metric_pattern=r"val loss (\S+)")
    assert status == Status.BAD_METRIC and "nan" in reason


def test_no_metric_names_every_way_and_the_lines_that_nearly_matched(tmp_path):
    status, _, _, reason = classify(
        exit_code=0, timed_out=False, oom_killed=False, interrupted=False, out_dir=tmp_path,
        log_tail=NANOGPT_LOG + "saving checkpoint\n", metric="val_loss",
        metric_pattern=r"val_loss=([0-9.]+)")
    assert status == Status.NO_METRIC
    for way in ("result.json", "`---`", "metric_pattern 'val_loss=([0-9.]+)' matched no line"):
        assert way in reason, reason
    assert "step 300: train loss 1.8800, val loss 2.0000" in reason
    assert "saving checkpoint" not in reason
    _, _, _, plain = judge(tmp_path, log="hello\n")
    assert "no metric_pattern in program.md" in plain and "set metric_pattern" in plain


TORCH_CRASH = """step 0 | loss 4.2
Traceback (most recent call last):
  File "/tmp/nightshift/run-3/work/makemore.py", line 688, in <module>
    logits, loss = model(X, Y)
                   ^^^^^^^^^^^
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1553, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/tmp/nightshift/run-3/work/makemore.py", line 77, in forward
    x = self.c_attn(x)
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 117, in forward
    return F.linear(input, self.weight, self.bias)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 65x64)
"""


def crash_reason(tmp_path, log: str, repository: Path | None) -> str:
    return classify(exit_code=1, timed_out=False, oom_killed=False, interrupted=False,
                    out_dir=tmp_path, log_tail=log, metric="loss", repository=repository)[3]


def test_a_crash_in_a_library_names_the_users_file_and_line(tmp_path):
    # A torch traceback ends in site-packages; the summary names the script's own line, by
    # its path in the repository, not the folder the backend ran it from.
    repository = tmp_path / "repo"
    (repository / "src").mkdir(parents=True)
    (repository / "makemore.py").write_text("")
    assert crash_reason(tmp_path, TORCH_CRASH, repository) == (
        "exit code 1: RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 65x64) "
        "(makemore.py line 77, in forward)")
    (repository / "src" / "makemore.py").write_text("")
    nested = TORCH_CRASH.replace("/tmp/nightshift/run-3/work/", "/work/src/")
    assert crash_reason(tmp_path, nested, repository).endswith("(src/makemore.py line 77, in forward)")
    # without the repository: the file name of the last frame outside the libraries
    assert crash_reason(tmp_path, TORCH_CRASH, None).endswith("(makemore.py line 77, in forward)")


def test_a_crash_names_no_frame_the_repository_does_not_hold(tmp_path):
    assert crash_reason(tmp_path, TORCH_CRASH, tmp_path).endswith("(32x64 and 65x64)")
    escaping = TORCH_CRASH.replace("/tmp/nightshift/run-3/work/makemore.py", "../../etc/hostname")
    assert crash_reason(tmp_path, escaping, tmp_path).endswith("(32x64 and 65x64)")
    assert crash_reason(tmp_path, "Traceback\nKeyError: 'x'\n", tmp_path) == "exit code 1: KeyError: 'x'"


# makemore.py's lines: its evaluation every 500 steps, and a note when the test loss improved
MAKEMORE_LOG = ("step 490 | loss 2.3301 | step time 10.12ms\n"
                "step 500 train loss: 2.3145678691864014 test loss: 2.3412\n"
                "test loss 2.3412 is the best so far, saving model to out/model.pt\n"
                "step 1000 train loss: 2.3045678691864014 test loss: 2.3512\n"
                "step 1000 | loss 2.3107 | step time 10.40ms\n")


def no_metric(tmp_path, log: str, metric: str, pattern: str | None) -> str:
    status, _, _, reason = classify(exit_code=0, timed_out=False, oom_killed=False, interrupted=False,
                                    out_dir=tmp_path, log_tail=log, metric=metric, metric_pattern=pattern)
    assert status == Status.NO_METRIC
    return reason


@pytest.mark.parametrize("log, metric, pattern, suggested, value", [
    (MAKEMORE_LOG, "test_loss", None, "test loss: ([0-9.]+)", 2.3512),
    (MAKEMORE_LOG.replace("2.3512", "2.3300") + "test loss 2.3300 is the best so far, saving model to out/model.pt\n",
     "test_loss", None, "test loss: ([0-9.]+)", 2.33),      # its last line is the note, not the report
    (MAKEMORE_LOG, "test_loss", "val loss ([0-9.]+)", "test loss: ([0-9.]+)", 2.3512),
    (MAKEMORE_LOG, "val_loss", "Test Loss ([0-9.]+)", "test loss: ([0-9.]+)", 2.3512),
    (NANOGPT_LOG, "val_loss", r"val_loss=([0-9.]+)", "val loss ([0-9.]+)", 2.0),
    ("epoch 3 val_bpb=1.5e-3 done\n", "val_bpb", None, "val_bpb=([-+0-9.eE]+)", 1.5e-3),
])
def test_a_wrong_pattern_gets_one_that_captures_the_metric(tmp_path, log, metric, pattern, suggested, value):
    reason = no_metric(tmp_path, log, metric, pattern)
    assert f"this would capture it: metric_pattern: '{suggested}'" in reason
    # the suggestion, as program.md would carry it, finds the number the line printed
    status, found, _, _ = classify(exit_code=0, timed_out=False, oom_killed=False, interrupted=False,
                                   out_dir=tmp_path, log_tail=log, metric=metric, metric_pattern=suggested)
    assert (status, found) == (Status.OK, value)


def test_no_pattern_is_suggested_without_a_number_after_the_name(tmp_path):
    assert "would capture" not in no_metric(tmp_path, "test loss unavailable\nstep 3\n", "test_loss", None)
    assert "would capture" not in no_metric(tmp_path, "hello\n", "val_bpb", None)


def test_a_long_error_line_is_cut_in_the_middle_so_the_path_survives(tmp_path):
    path = "/very/long/" + "x" * 300 + "/data/shakespeare_char/train.bin"
    _, _, _, reason = judge(tmp_path, exit_code=1, log=f"FileNotFoundError: No such file: '{path}'")
    assert reason.startswith("exit code 1: FileNotFoundError") and reason.endswith("train.bin'")
    assert len(reason) < 280


def test_capped_log_passes_on_each_update_of_a_bar_as_it_is_drawn(tmp_path):
    """tqdm redraws with \\r and writes no newline until it closes: each update reaches the
    callback when the next begins, a \\r\\n line end stays one line, the file is unchanged."""
    lines: list[str] = []
    log = CappedLog(tmp_path / "log.txt", 10_000, lines.append)
    log.write(b"  1%| | 1/100\r")
    assert lines == []                         # a \r\n may yet follow
    log.write(b"  2%| | 2/100\r  3%| | 3/100")
    assert lines == ["  1%| | 1/100", "  2%| | 2/100"]
    log.write(b"\r\nwindows line\r\nlast")
    log.close()
    assert lines[2:] == ["  3%| | 3/100", "windows line", "last"]
    assert (tmp_path / "log.txt").read_bytes() == b"  1%| | 1/100\r  2%| | 2/100\r  3%| | 3/100\r\nwindows line\r\nlast"
