"""Source tables: a table over an existing compacted topic that others write (`app.Table(name,
source_topic=...)`): its partitions follow this worker's active partitions, replayed from that topic, and
it has no changelog of its own. It cannot be windowed (its records are not engine's window layout), but it
can be versioned: each record a version of its key (engine.tables.versioned_source).

    prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import ConfigError
from engine.tables.table import Table
from engine.tables.versioned_source import VersionedSourceTable

if TYPE_CHECKING:
    from engine.stores.base import PartitionStore
    from engine.tables.event_time import Timestamp
    from engine.tables.windowed import WindowedTable
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

    def _changelog_codecs(self, **codecs: Any) -> None:
        """(Its topic keeps its own codecs: a versioned table over it makes its versions where the records
        reach its store, engine.tables.versioned_source.)"""

    def store_for(self, store: PartitionStore, number: int) -> PartitionStore:
        if isinstance(self.windowed, VersionedSourceTable):
            return self.windowed.source_store(store, number)
        return store
