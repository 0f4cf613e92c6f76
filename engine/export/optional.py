"""Optional dependencies of the export bridge (pyarrow, pyspark): imported on first use, with a message that
says how to install them instead of a bare ImportError."""

from __future__ import annotations

import importlib
from typing import Any

from engine.errors import ConfigError

INSTALL = "pip install 'engine[spark]'"


class MissingDependency(ConfigError):
    """An optional extra is not installed."""


def require(module: str, feature: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{feature} needs {module.split('.')[0]}, which is not installed; "
            f"install the spark extra: {INSTALL}"
        ) from exc
