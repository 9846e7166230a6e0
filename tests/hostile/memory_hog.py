# Allocates (and touches) 50 MB blocks, stopping by itself at 3 GB if no limit bites.
import sys
blocks = []
for i in range(60):
    blocks.append(b"\x01" * (50 << 20))
    print(f"allocated {(i + 1) * 50} MB", flush=True)
print("no memory limit hit at 3 GB", flush=True)
sys.exit(3)
