import json, os
out = os.environ["NIGHTSHIFT_OUT"]
with open(os.path.join(out, "result.json"), "w") as fh:
    json.dump({"val_bpb": 1.23, "steps": 10}, fh)
print("---\nval_bpb: 1.23\nsteps: 10")
