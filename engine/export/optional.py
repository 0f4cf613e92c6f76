"""Optional dependencies of the export bridge (pyarrow, pyspark, deltalake, pyiceberg): imported on first
use, with a message that says how to install them instead of a bare ImportError."""

from __future__ import annotations

import contextlib
import importlib
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterator

INSTALL = "pip install 'engine[spark]'"


class MissingDependency(ConfigError):
    """An optional extra is not installed."""


@contextlib.contextmanager
def needs(library: str, feature: str) -> Iterator[None]:
    """Imports of `library` inside raise MissingDependency, saying that `feature` needs it and how to install
    it. A module that imports a library with its own import statements inside (not `require`) is seen by
    import-linter's contracts, which name the one module each library may be imported by."""
    try:
        yield
    except ImportError as exc:
        raise MissingDependency(
            f"{feature} needs {library}, which is not installed; "
            f"install the spark extra: {INSTALL}"
        ) from exc


def require(module: str, feature: str) -> Any:
    """`module` of pyarrow or pyspark, which any module of the export bridge may use. (import-linter cannot
    see an import made this way: a library kept to one module is imported there, inside `needs`.)"""
    with needs(module.split(".")[0], feature):
        found = importlib.import_module(module)
    return found
