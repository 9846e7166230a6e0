import json, os
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as fh:
    json.dump({"steps": 10}, fh)
print("done, but forgot the metric")
