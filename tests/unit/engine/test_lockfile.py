"""The lock of an app's data dir that an `engine worker` process holds (engine.lockfile)."""

from __future__ import annotations

import os

import pytest

from engine.errors import ConfigError
from engine.lockfile import LOCK_NAME, holding


def test_a_second_holder_is_refused_with_the_pid_of_the_first_and_the_lock_is_free_after(tmp_path):
    folder = tmp_path / "data" / "app"
    with holding(folder):
        assert (folder / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(ConfigError, match=rf"in use by another worker process \(pid {os.getpid()}\)"), \
                holding(folder):
            pass  # pragma: no cover
    with holding(folder):  # released when the first let go
        pass
