"""agent.run.outputs: what of a run's outputs is kept (keep: globs, or result.json and
small files, not checkpoints), and which tracked files a run changed in its own layer."""
from agent.run.outputs import is_kept, prune, touches


def test_default_keeps_the_result_and_small_files_but_not_checkpoints():
    assert is_kept("result.json", 5_000_000, None)
    assert is_kept("samples.txt", 10_000, None)
    assert not is_kept("big.log", 5_000_000, None)
    assert not is_kept("out-shakespeare-char/ckpt.pt", 9_000_000, None)
    assert not is_kept("tiny.pt", 100, None)                              # a checkpoint by name
    assert not is_kept("checkpoint-500/trainer_state.json", 100, None)   # inside a checkpoint folder


def test_keep_globs_decide_and_the_metric_file_always_stays():
    keep = ("*.json", "samples/*.txt")
    assert is_kept("eval/metrics.json", 10, keep) and is_kept("samples/a.txt", 10, keep)
    assert not is_kept("notes.txt", 10, keep)
    assert is_kept("all_results.json", 10, ("*.txt",), always=("all_results.json",))


def test_prune_deletes_what_is_not_kept_and_names_changed_tracked_files(tmp_path):
    out, work, snapshot = tmp_path / "out", tmp_path / "work", tmp_path / "snapshot"
    for folder in (out, work / "ckpt", snapshot):
        folder.mkdir(parents=True)
    (out / "result.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"x" * 10)
    (work / "ckpt" / "model.pt").write_bytes(b"x" * 2000)
    (work / "train.py").write_text("edited")
    (snapshot / "train.py").write_text("original")
    (snapshot / "old.txt").write_text("tracked")
    written = {"ckpt/model.pt": 2000, "train.py": 6, "old.txt": None}
    outputs = prune(out, work, written, snapshot, None)
    assert outputs.kept == {"out": {"result.json": 2}, "work": {"train.py": 6}}
    assert outputs.dropped == {"out": {"model.safetensors": 10}, "work": {"ckpt/model.pt": 2000}}
    assert (outputs.tracked_changed, outputs.tracked_deleted) == (["train.py"], ["old.txt"])
    assert not (work / "ckpt").exists() and (out / "result.json").exists()


def test_a_write_into_a_protected_folder_is_found():
    assert touches(["train/prepare.py", "notes.txt"], ["train/prepare.py"]) == ["train/prepare.py"]
    assert touches(["data/eval/x.bin"], ["data/eval"]) == ["data/eval"]
    assert touches(["data/evaluation.py"], ["data/eval"]) == []
