import os, sys
megabytes = int(os.environ.get("HOSTILE_MB", "50"))
line = b"x" * 1023 + b"\n"
block = line * 1024
for i in range(megabytes):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.write(b"---\nval_bpb: 1.0\n")
