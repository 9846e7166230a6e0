"""A host-mode image records the interpreter it carries (sandbox/image.py); a harness running
another one is refused before any run, saying which and how to rebuild. No engine needed."""
import json
import sys
import sysconfig

import pytest

from sandbox.image import (LABEL_MODE, LABEL_PREFIXES, LABEL_PYTHON, ImageError, python_executable,
                           python_prefixes, runtime_mounts)


def test_an_image_of_this_interpreter_mounts_its_view_and_not_the_whole_host():
    """The run's view (sandbox.view): this interpreter's standard library and packages, the
    libraries it links, a shell; not /usr, not the prefixes whole."""
    labels = {LABEL_MODE: "host", LABEL_PREFIXES: json.dumps(python_prefixes()),
              LABEL_PYTHON: python_executable()}
    targets = [mount.target for mount in runtime_mounts(labels)]
    paths = sysconfig.get_paths()
    # site-packages is mounted itself, or inside the standard library's folder (an interpreter
    # whose packages live under lib/python3.X, not a venv's)
    assert paths["stdlib"] in targets
    assert any(paths["purelib"] == t or paths["purelib"].startswith(t + "/") for t in targets)
    assert "/usr" not in targets and not any(prefix in targets for prefix in python_prefixes())
    assert "/usr/bin/sh" in targets and "/etc/passwd" not in targets   # the image has its own users


def test_an_image_of_another_interpreter_is_refused_naming_both(tmp_path):
    other = tmp_path / "venv-a"
    (other / "bin").mkdir(parents=True)
    labels = {LABEL_MODE: "host", LABEL_PREFIXES: json.dumps([str(other)]),
              LABEL_PYTHON: f"{other}/bin/python"}
    with pytest.raises(ImageError) as caught:
        runtime_mounts(labels)
    message = str(caught.value)
    assert f"{other}/bin/python" in message and sys.executable in message
    assert "python -m sandbox.image build --mode host" in message and "sandbox: local" in message


def test_two_environments_sharing_one_interpreter_path_are_told_apart(tmp_path):
    """A virtualenv's python resolves to its base's: the image and the harness can name the
    same executable while carrying different packages. The message names their prefixes."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    labels = {LABEL_MODE: "host", LABEL_PREFIXES: json.dumps([str(venv), *python_prefixes()]),
              LABEL_PYTHON: python_executable()}
    with pytest.raises(ImageError) as caught:
        runtime_mounts(labels)
    message = str(caught.value)
    built = f"{python_executable()} (environment {venv} + {' + '.join(python_prefixes())})"
    assert f"carries the Python of {built}, but this harness runs " in message
    assert f"(environment {' + '.join(python_prefixes())})" in message.split("this harness runs ")[1]
