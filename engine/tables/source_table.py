"""Source tables: a table over an existing compacted topic that others write (`app.Table(name,
source_topic=...)`): its partitions follow this worker's active partitions, replayed from that topic, and
it has no changelog of its own. It cannot be windowed (its records are not engine's window layout).

    prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import ConfigError
from engine.tables.table import Table

if TYPE_CHECKING:
    from engine.tables.versioned import VersionedTable
    from engine.tables.windowed import Timestamp, WindowedTable
    from engine.topics import Topic
    from engine.windows import Seconds, Window


class SourceTable(Table):
    """A table rebuilt from `source_topic`, partitioned like it."""

    kind: ClassVar[str] = "source"

    def __init__(self, name: str, *, app_id: str, source_topic: Topic, **options: Any) -> None:
        super().__init__(name, app_id=app_id, source_topic=source_topic, **options)

    def windowed_by(self, window: Window, *, timestamp: Timestamp | None = None, late_topic: bool = False,
                    close_idle_after: Seconds | None = None) -> WindowedTable:
        raise ConfigError(f"table {self.name!r} reads a source topic; it cannot be windowed")

    def versioned(self, history: Seconds, *, timestamp: Timestamp | None = None,
                  late_topic: bool = False) -> VersionedTable:
        """(Not yet: its topic is its changelog, and keeps no versions.)"""
        raise ConfigError(f"table {self.name!r} reads a source topic, which keeps no versions: declare it "
                          "without source_topic and write each record of the topic into it from an agent "
                          "(docs: joins, tables through time)")
