"""A sleep-paced night scored by a protected evaluator, for the cluster backends' tests.

The training script leaves a "model" (its value) in result.json and reads the training split;
a protected prepare step writes three splits with a meta.json that declares them; the
protected evaluator `grade.py` reads the training outputs ({train_out}) and the split it
scores. The val split's source (a file outside the splits, as the standard library is the
bundled corpus's) is declared in meta.json's `held_out_sources`. So a night on a cluster shows
the two steps, the evaluator's metric, and the hidden splits and their hidden source working
where the runs land.
"""
from tests.night.test_scheduler import PROGRAM, SLEEPY

GRADED_SCRIPT = SLEEPY.replace('json.dump({"val_bpb": value,', 'json.dump({"model": value, "train": open(os.path.join('
                               'os.environ["NIGHTSHIFT_DATA"], "train.bin")).read(), "val_size": os.path.getsize(os.path.join('
                               'os.environ["NIGHTSHIFT_DATA"], "val.bin")), "source_size": next((os.path.getsize(p) for p in '
                               '[json.load(open(os.path.join(os.environ["NIGHTSHIFT_DATA"], "meta.json")))["held_out_sources"]["paths"][0]] '
                               'if os.path.exists(p)), None),')   # stats: no open; None: not in the run's view
PREPARE = """import json, os
root = os.path.join(os.environ["NIGHTSHIFT_DATA_ROOT"], "splits")
os.makedirs(root, exist_ok=True)
for split in ("train", "val", "test"):
    open(os.path.join(root, split + ".bin"), "w").write(split + " bytes")
source = os.path.join(os.environ["NIGHTSHIFT_DATA_ROOT"], "val-source.txt")   # where val was cut from
open(source, "w").write("the val bytes' source")
json.dump({"splits": {s: s + ".bin" for s in ("train", "val", "test")},
           "held_out_sources": {"paths": [source]}}, open(os.path.join(root, "meta.json"), "w"))
print("data_dir:", root)
"""
GRADE = """import json, os, sys
model = json.load(open(os.path.join(sys.argv[1], "result.json")))["model"]
assert open(os.path.join(os.environ["NIGHTSHIFT_DATA"], "val.bin")).read() == "val bytes"
print("---")
print("val_bpb:", model + 0.001)
"""
GRADED_PROGRAM = PROGRAM.replace("protected: []", "protected: [grade.py, prep.py]").replace(
    "prepare: null", "prepare: python prep.py\nevaluate: python grade.py {train_out}")


