"""The export bridge's optional libraries (pyarrow, pyspark, deltalake, pyiceberg), all in the spark extra:
`engine.optional.needs` bound to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import MissingDependency
from engine.optional import needs as _needs

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

__all__ = ["MissingDependency", "needs"]


def needs(library: str, feature: str) -> AbstractContextManager[None]:
    """Imports of `library` inside raise MissingDependency, naming the spark extra."""
    return _needs(library, feature, extra="spark")
