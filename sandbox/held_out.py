"""Where the bytes of the held-out splits lie on this machine, besides the split files: what a
run must not see. Standard library only, so a container of a self-contained image runs it too.

The bundled data's meta.json says (`held_out_sources`, written by train/prepare.py):
- `units`: files and folders of the standard library that val and test were cut from. A run's
  view (sandbox.view) holds one standard library, its interpreter's, and there they are absent
  (a copy without them); each unit's place, with the bytecode caches of single-file modules
  (`__pycache__/mailbox.cpython-311.pyc`), gets a watched stand-in. Other Pythons are not in
  the view at all; a self-contained image's own standard library is listed by running this
  module inside it (`stdlib_roots`);
- `paths`: absolute files (a corpus folder's val and test files; exact copies of held-out
  files found elsewhere at preparation);
- `siblings`: the other folders of the data root (earlier preparations hold the same bytes),
  which the local sandbox hides whole (a container sees only its mounts).

`covers(held_out)` lists them as `Cover`s: a folder with the files under it, so the tripwire
(sandbox.tripwire) can lay an empty stand-in of the same shape over it and watch every file.
"""
from __future__ import annotations

import glob
import os
import sys
import sysconfig
from dataclasses import dataclass

LABEL = "held-out source"


@dataclass(frozen=True)
class Cover:
    """A file or folder to lay a watched stand-in over; `files` are a folder's, relative."""

    target: str
    files: tuple[str, ...] = ()
    is_dir: bool = False
    label: str = LABEL


def stdlib_roots() -> list[str]:
    """The standard libraries of the Python installations this machine has."""
    found = [sysconfig.get_paths()["stdlib"]]
    for base in ("/usr/lib", "/usr/local/lib", sys.base_prefix + "/lib", sys.prefix + "/lib",
                 os.path.expanduser("~/.pyenv/versions/*/lib")):
        found += glob.glob(os.path.join(base, "python3*"))
    roots: list[str] = []
    for path in found:
        real = os.path.realpath(path)
        if os.path.isfile(os.path.join(real, "os.py")) and real not in roots:   # a stdlib, not a stray folder
            roots.append(real)
    return roots


def listing(units: list[str], roots: list[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """{root: {unit: [its files, relative; [] for a file unit]}} for each unit found in each
    standard library (and the caches of a file unit, as units of their own)."""
    result: dict[str, dict[str, list[str]]] = {}
    for root in roots if roots is not None else stdlib_roots():
        here: dict[str, list[str]] = {}
        for unit in units:
            path = os.path.join(root, unit)
            if os.path.isdir(path) and not os.path.islink(path):
                here[unit] = sorted(os.path.relpath(os.path.join(folder, name), path)
                                    for folder, _dirs, names in os.walk(path) for name in names)
            elif os.path.isfile(path):
                here[unit] = []
                stem = unit[:-3] if unit.endswith(".py") else unit
                for cache in glob.glob(os.path.join(root, "__pycache__", stem + ".*.pyc")):
                    here[os.path.relpath(cache, root)] = []
        if here:
            result[root] = here
    return result


def covers(units: list[str], paths: list[str], layout: dict[str, dict[str, list[str]]] | None = None
           ) -> list[Cover]:
    """The covers for `units` (in every standard library of `layout`, default: this machine's)
    and `paths` (those that exist here)."""
    found = []
    for root, here in (layout if layout is not None else listing(units)).items():
        for unit, files in sorted(here.items()):
            target = os.path.join(root, unit)
            found.append(Cover(target, tuple(files), is_dir=bool(files)))
    covered = [c.target for c in found]
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):   # not twice: a unit holds it already
        if os.path.isfile(path) and not any(path == t or path.startswith(t + os.sep) for t in covered):
            found.append(Cover(path))
    return found


if __name__ == "__main__":   # inside a self-contained image: its own standard library's layout
    import json
    print(json.dumps(listing(json.loads(sys.argv[1]))))
