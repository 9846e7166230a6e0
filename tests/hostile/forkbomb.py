# Forks sleeping children until refused, but never more than 2000: if the sandbox's limit
# fails, the test machine survives.
import json, os, time
out = os.environ["NIGHTSHIFT_OUT"]
count, error = 0, ""
while count < 2000:
    try:
        pid = os.fork()
    except OSError as exc:
        error = str(exc)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    count += 1
print(f"forked {count} children; refused: {error}", flush=True)
with open(os.path.join(out, "result.json"), "w") as fh:
    json.dump({"val_bpb": 1.0, "forked": count, "refused": error}, fh)
