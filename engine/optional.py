"""Optional dependencies (the extras: spark, otel): imported on first use, with a message that says how to
install them instead of a bare ImportError."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from engine.errors import MissingDependency

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def needs(library: str, feature: str, *, extra: str) -> Iterator[None]:
    """Imports of `library` inside raise MissingDependency, saying that `feature` needs it and how to install
    it (`pip install 'engine-streams[<extra>]'`). The imports are plain statements, so that import-linter's
    contracts see them (those that keep a library to one module)."""
    try:
        yield
    except ImportError as exc:
        raise MissingDependency(
            f"{feature} needs {library}, which is not installed; "
            f"install the {extra} extra: pip install 'engine-streams[{extra}]'"
        ) from exc
