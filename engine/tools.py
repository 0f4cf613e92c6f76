"""What operations tools use besides the App API: the `engine` CLI, and scripts of users that inspect or
manage an app. The CLI imports only this, the `engine` package and `engine.export` (a test checks it).

- The topology an app declares (`build_topology`, `Topology`) and the partition count a topic gets
  (`planned_partitions`).
- The broker an app's settings name: `open_transport` gives its admin (`Admin`: topics, groups, offsets),
  with `TopicSpec` and `GroupDescription`.
- An app's local table stores, read beside a running worker or offline (`table_named`, `local_partitions`,
  `read_key`, which returns `MISSING` for a key that is not there).
- JSON as engine encodes and decodes it (`dumps`, `loads`), and the progress of a changelog replay
  (`Progress`).
- A key as a person types it, decoded with a table's key codec (`parse_key`).
- Logging as `engine worker` does it: aiokafka's repeated errors summarised (`summarise_repeats`).
- Resetting an app for reprocessing (`plan_reset`, `execute_reset`, `ResetTarget`, `ResetRefused`).
"""

from engine.codecs import dumps, loads
from engine.monitors.logsummary import summarise_repeats
from engine.operations.reset import ResetPlan, ResetRefused, ResetTarget, plan_reset
from engine.operations.reset import execute as execute_reset
from engine.tables.inspect import local_partitions, read_key, table_named
from engine.tables.partition import MISSING
from engine.tables.recovery import Progress
from engine.topology.plan import Topology, build_topology, planned_partitions
from engine.transport import open_transport
from engine.transport.base import Admin, GroupDescription, TopicSpec
from engine.web.queries import parse_key

__all__ = [
    "MISSING",
    "Admin",
    "GroupDescription",
    "Progress",
    "ResetPlan",
    "ResetRefused",
    "ResetTarget",
    "TopicSpec",
    "Topology",
    "build_topology",
    "dumps",
    "execute_reset",
    "loads",
    "local_partitions",
    "open_transport",
    "parse_key",
    "plan_reset",
    "planned_partitions",
    "read_key",
    "summarise_repeats",
    "table_named",
]
