"""Where an export goes, as a user writes it: `delta:PATH` for a Delta Lake table, anything else a directory
of Parquet files with a manifest (engine.export.parquet)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.export.columns import ExportError

DELTA = "delta"
PARQUET = "parquet"
LAKES = (DELTA,)


@dataclass(frozen=True)
class Target:
    kind: str  # DELTA or PARQUET
    location: str  # a path

    @property
    def is_lake(self) -> bool:
        return self.kind in LAKES

    def child(self, name: str) -> Target:
        """The target of one table in an export of several (`export_app`): a sub-directory."""
        return Target(self.kind, str(Path(self.location) / name))

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
        location = Path(rest)
        if location.exists() and not location.is_dir():
            raise ExportError(f"cannot export to {text}: {rest} is a file; a Delta table is a directory")
        return Target(DELTA, rest)
    if sep and kind.isalpha() and len(kind) > 1 and not Path(text).exists():
        raise ExportError(f"unknown export target {kind!r} in {text!r}: give delta:PATH, or a directory for "
                          "Parquet files")
    location = Path(text)
    if location.exists() and not location.is_dir():
        raise ExportError(f"cannot export to {location}: it is a file; an export is a directory (give a new "
                          "path, or an earlier export's directory to replace it)")
    return Target(PARQUET, text)
