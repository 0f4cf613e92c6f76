"""Optional dependencies of the export bridge (pyarrow, pyspark, deltalake, pyiceberg): imported on first
use, with a message that says how to install them instead of a bare ImportError."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterator

INSTALL = "pip install 'engine[spark]'"


class MissingDependency(ConfigError):
    """An optional extra is not installed."""


@contextlib.contextmanager
def needs(library: str, feature: str) -> Iterator[None]:
    """Imports of `library` inside raise MissingDependency, saying that `feature` needs it and how to install
    it. The imports are plain statements, so that import-linter's contracts see them (those that keep a
    library to one module, and the one that keeps pyarrow and pyspark in the export bridge)."""
    try:
        yield
    except ImportError as exc:
        raise MissingDependency(
            f"{feature} needs {library}, which is not installed; "
            f"install the spark extra: {INSTALL}"
        ) from exc
