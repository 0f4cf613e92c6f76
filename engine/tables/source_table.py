"""Source tables: a table over an existing compacted topic that others write (`app.Table(name,
source_topic=...)`): its partitions follow this worker's active partitions, replayed from that topic, and
it has no changelog of its own. It cannot be windowed (its records are not engine's window layout).

    prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import ConfigError
from engine.tables.keys import WindowKeyCodec
from engine.tables.table import Table
from engine.tables.versioned import VersionValueCodec
from engine.tables.versioned_source import VersionedSourceTable
from engine.topics import Topic
from engine.windows import History

if TYPE_CHECKING:
    from engine.stores.base import PartitionStore
    from engine.tables.event_time import Timestamp
    from engine.tables.versioned import VersionedTable
    from engine.tables.windowed import WindowedTable
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
        """Make each record of the topic a version of its key at its time (the record's, or `timestamp=`'s),
        kept for `history` of the partition's stream time (engine.tables.versioned_source)."""
        if self.window is not None:
            raise ConfigError(f"table {self.name!r} is already windowed")
        window = History(history)
        self.window = window
        self.key_codec = WindowKeyCodec(self.plain_key_codec)  # (the store's keys; the topic's stay plain)
        self.value_codec = VersionValueCodec(self.row_codec)
        late = Topic(f"{self.app_id}-{self.name}-late", key_serializer="raw", value_serializer="raw",
                     internal=True) if late_topic else None
        versioned = VersionedSourceTable(self, window, timestamp=timestamp, late_topic=late)
        self.windowed = versioned
        return versioned

    def store_for(self, store: PartitionStore, number: int) -> PartitionStore:
        if isinstance(self.windowed, VersionedSourceTable):
            return self.windowed.source_store(store, number)
        return store
