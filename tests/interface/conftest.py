"""One small night for the whole folder (tests/interface/night.py): written once per worker."""
from __future__ import annotations

import pytest

from tests.interface.night import Night, write_night


@pytest.fixture(scope="session")
def night(tmp_path_factory) -> Night:
    return write_night(tmp_path_factory.mktemp("interface"))
