"""Print the README's quick-start commands, one a line: the first two ```bash blocks under
"## Quick start", so CI runs exactly what a new user copies (`.ci/run`, stage 1)."""
import re
import sys
from pathlib import Path

text = Path(sys.argv[1]).read_text(encoding="utf-8")
section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
blocks = [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]
if len(blocks) < 2 or any("\n" in block for block in blocks[:2]):
    sys.exit(f"{sys.argv[1]}: the quick start must open with two one-line ```bash blocks "
             f"(install and run, then test); found {blocks[:2]}")
print(blocks[0])
print(blocks[1])
