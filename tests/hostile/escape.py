# A child that leaves the process group and session, ignores SIGTERM and outlives us.
import json, os, signal, time
out = os.environ["NIGHTSHIFT_OUT"]
pid = os.fork()
if pid == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork():          # double fork: the grandchild is orphaned
        os._exit(0)
    with open(os.path.join(out, "escape.json"), "w") as fh:
        json.dump({"pid": os.getpid()}, fh)
    time.sleep(3600)
    os._exit(0)
os.waitpid(pid, 0)
for _ in range(100):       # wait until the grandchild has checked in
    if os.path.exists(os.path.join(out, "escape.json")):
        break
    time.sleep(0.02)
with open(os.path.join(out, "result.json"), "w") as fh:
    json.dump({"val_bpb": 1.0}, fh)
