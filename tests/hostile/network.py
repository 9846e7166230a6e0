import json, os, socket
out, port = os.environ["NIGHTSHIFT_OUT"], int(os.environ["HOSTILE_PORT"])
seen = {}
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    seen["tcp"] = "connected"
except OSError as exc:
    seen["tcp"] = f"refused: {exc}"
try:
    seen["dns"] = socket.getaddrinfo("pypi.org", 443)[0][4][0]
except OSError as exc:
    seen["dns"] = f"refused: {exc}"
with open(os.path.join(out, "network.json"), "w") as fh:
    json.dump(seen, fh)
with open(os.path.join(out, "result.json"), "w") as fh:
    json.dump({"val_bpb": 1.0}, fh)
