"""Where an export goes, as a user writes it: `delta:PATH` for a Delta Lake table (PATH a directory here, or
an object store's URI such as `s3://bucket/path`), `iceberg:[CATALOG.]NAMESPACE.TABLE` for an Iceberg table
(engine.export.iceberg), anything else a directory of Parquet files with a manifest
(engine.export.parquet)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError, ExportError

DELTA = "delta"
ICEBERG = "iceberg"
PARQUET = "parquet"
LAKES = (DELTA, ICEBERG)
ALL = "all"  # every table of the app (that is not global), in one export


@dataclass(frozen=True)
class Target:
    kind: str  # DELTA, ICEBERG or PARQUET
    location: str  # a path (for DELTA, or a URI); for ICEBERG, [CATALOG.]NAMESPACE.TABLE

    @property
    def is_lake(self) -> bool:
        return self.kind in LAKES

    def child(self, name: str) -> Target:
        """The target of one table in an export of several (`export_app`): a sub-directory, or for Iceberg
        a table of that name in the namespace the target names."""
        if self.kind == ICEBERG:
            return Target(ICEBERG, f"{self.location}.{name}")
        if is_uri(self.location):
            return Target(self.kind, f"{self.location.rstrip('/')}/{name}")
        return Target(self.kind, str(Path(self.location) / name))

    def absolute(self) -> Target:
        """The target as another process takes it (a worker, in its own directory): a path on this machine
        made absolute; a URI, or an Iceberg table, as it is."""
        if self.kind == ICEBERG or is_uri(self.location):
            return self
        return Target(self.kind, os.path.abspath(self.location))

    def __str__(self) -> str:
        return self.location if self.kind == PARQUET else f"{self.kind}:{self.location}"


def parse_target(target: Target | Path | str) -> Target:
    """`target` as a Target: an ExportError, before any work, for one that cannot be written."""
    if isinstance(target, Target):
        return target
    text = str(target)
    kind, sep, rest = text.partition(":")
    if sep and kind == DELTA:
        if not rest:
            raise ExportError("delta: needs a path, as in delta:exports/counts")
        if is_uri(rest):
            return Target(DELTA, rest)  # an object store's (its credentials come from the environment)
        location = Path(rest)
        if location.exists() and not location.is_dir():
            raise ExportError(f"cannot export to {text}: {rest} is a file; a Delta table is a directory")
        return Target(DELTA, rest)
    if sep and kind == ICEBERG:
        if not rest or "/" in rest:
            raise ExportError(f"{text}: give iceberg:NAMESPACE.TABLE (or iceberg:CATALOG.NAMESPACE.TABLE)")
        return Target(ICEBERG, rest)
    if sep and kind.isalpha() and len(kind) > 1 and not Path(text).exists():
        raise ExportError(f"unknown export target {kind!r} in {text!r}: give delta:PATH, "
                          "iceberg:NAMESPACE.TABLE, or a directory for Parquet files")
    location = Path(text)
    if location.exists() and not location.is_dir():
        raise ExportError(f"cannot export to {location}: it is a file; an export is a directory (give a new "
                          "path, or an earlier export's directory to replace it)")
    return Target(PARQUET, text)


def is_uri(location: str) -> bool:
    """Whether `location` is a URI (`s3://bucket/path`), not a path on this machine."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.isalnum() and scheme != "file"


def lake_target(target: str, what: str) -> Target:
    """`target` parsed; a ConfigError unless it is a lake table (rounds go into one)."""
    where = parse_target(target)
    if not where.is_lake:
        raise ConfigError(f"{what} needs a lake table (delta:PATH or iceberg:NAMESPACE.TABLE), not "
                          f"{target!r}: every worker exports its own partitions into it, where a Parquet "
                          "directory holds one export's files")
    return where
