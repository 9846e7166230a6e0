import json, os
out = os.environ["NIGHTSHIFT_OUT"]
targets = {
    "outside": os.environ["HOSTILE_OUTSIDE"],
    "snapshot_new": "planted.py",
    "snapshot_existing": "train.py",
    "tmp": "/tmp/nightshift-hostile-was-here",
    "root": "/etc/nightshift-hostile-was-here",
}
seen = {}
for key, path in targets.items():
    try:
        with open(path, "a") as fh:
            fh.write("# tampered\n")
        seen[key] = "written"
    except OSError as exc:
        seen[key] = f"refused: {exc}"
with open(os.path.join(out, "write_outside.json"), "w") as fh:
    json.dump(seen, fh)
with open(os.path.join(out, "result.json"), "w") as fh:
    json.dump({"val_bpb": 1.0}, fh)
