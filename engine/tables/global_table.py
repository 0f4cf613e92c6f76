"""Global tables: every worker holds every partition, recovered before the worker starts and followed from
then on; reference data for joins (`stream.join(countries, key=...)` finds any key on any worker).

    countries = app.GlobalTable("countries", key_type=str, value_type=str)
"""

from __future__ import annotations

from typing import ClassVar

from engine.tables.base import BaseTable


class GlobalTable(BaseTable):
    """Backed by its own changelog, or by a `source_topic` others write; never routed by the current event
    (a write goes to the key's partition, wherever the event came from)."""

    kind: ClassVar[str] = "global"
    is_global: ClassVar[bool] = True
