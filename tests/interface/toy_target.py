"""A repository whose night an agent can drive in seconds: a target whose metric has a known
optimum (LR 0.3) and little noise, a protected helper, and program.md for --researcher external."""
from __future__ import annotations

TOY = '''\
import json, os, random
from helper import FACTOR

LR = 1.0            # the metric is best at LR 0.3
MODE = "a"          # changes nothing but the draw of the noise

seed = int(os.environ["NIGHTSHIFT_SEED"])
value = 2.0 + FACTOR * (LR - 0.3) ** 2 + random.Random(f"{seed}/{MODE}").gauss(0.0, 0.01)
with open(os.path.join(os.environ["NIGHTSHIFT_OUT"], "result.json"), "w") as out:
    json.dump({"val_bpb": value}, out)
print("---")
print(f"val_bpb: {value:.6f}")
'''

HELPER = "FACTOR = 1   # protected: a proposal that changes it is refused\n"

PROGRAM = '''\
---
target: toy.py
protected: [helper.py]
command: python toy.py
prepare: null
budget: 1s
grace: 30s
seeds: {baseline: 2, screen: 2, max: 4}
early_stop: off
sandbox: local
researcher: external
metric: val_bpb
---
Make val_bpb small by changing toy.py.
'''


def toy_files(program: str = PROGRAM) -> dict[str, str]:
    return {"toy.py": TOY, "helper.py": HELPER, "program.md": program}
