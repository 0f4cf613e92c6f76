"""What operations tools use besides the App API: the `engine` CLI, and scripts of users that inspect or
manage an app. The CLI imports only this, the `engine` package and `engine.export`, and `__all__` here is
exactly what it imports from this module (tests/unit/cli checks both).

- The topology an app declares (`build_topology`) and the partition count a topic gets
  (`planned_partitions`); the topology as a graph (`graph_of`) written out for Mermaid (`mermaid`) or
  Graphviz (`dot`).
- An app's group on the broker its settings name: its members (`GroupDescription`) and its lag
  (`group_status`).
- An app's local table stores, read beside a running worker or offline (`table_named`, `local_partitions`,
  `read_key`, which returns `MISSING` for a key that is not there).
- JSON as engine encodes and decodes it (`dumps`, `loads`), and the progress of a changelog replay
  (`Progress`).
- A key as a person types it, decoded with a table's key codec (`parse_key`), and as a URL names it
  (`key_text`); a running worker's web server asked (`ask_worker`).
- Sending to a topic from outside a worker (`sending`: the topic created first where the app declares it,
  or when asked), a key or value typed by a person decoded with a codec (`decode_text`).
- Running as `engine worker` does: aiokafka's repeated errors summarised (`summarise_repeats`), on the
  event loop the `event_loop` setting picks (`run_on_loop`: uvloop when installed); several worker
  processes under one supervisor (`run_processes`), as many as the `processes` setting says
  (`process_count`), each told in its environment what sets it apart (`member_environment`).
- Resetting an app for reprocessing (`plan_reset`, `execute_reset`, `ResetTarget`).
- What a user is told about each setting (`setting_docs`): its description, its default, its option and
  variable, from which the CLI makes its options.
"""

from typing import Any as _Any

from engine.codecs import decode_text, dumps, loads
from engine.loops import run as run_on_loop
from engine.monitors.logsummary import summarise_repeats
from engine.operations.inspect import local_partitions, read_key, table_named
from engine.operations.reset import ResetTarget, plan_reset
from engine.operations.reset import execute as execute_reset
from engine.operations.send import sending
from engine.operations.status import group_status
from engine.processes import member_environment, process_count, run_processes
from engine.settings_docs import setting_docs
from engine.tables.partition import MISSING
from engine.tables.recovery import Progress
from engine.tables.versions import parse_time_ms
from engine.topics import planned_partitions
from engine.topology.graph import dot, graph_of, mermaid
from engine.topology.plan import build_topology
from engine.transport.base import GroupDescription
from engine.web.queries import key_text, parse_key


async def ask_worker(url: str, path: str, body: _Any = None, timeout: float = 5.0
                     ) -> tuple[int, _Any] | None:
    """GET `path` of a running worker's web server at `url` (or POST `body` as JSON): (status, JSON body), or
    None if none answers within `timeout` seconds (engine.web.server; aiohttp is imported only when a tool
    asks)."""
    from engine.web.server import ask_worker as ask

    return await ask(url, path, body, timeout)

__all__ = [
    "MISSING",
    "GroupDescription",
    "Progress",
    "ResetTarget",
    "ask_worker",
    "build_topology",
    "decode_text",
    "dot",
    "dumps",
    "execute_reset",
    "graph_of",
    "group_status",
    "key_text",
    "loads",
    "local_partitions",
    "member_environment",
    "mermaid",
    "parse_key",
    "parse_time_ms",
    "plan_reset",
    "planned_partitions",
    "process_count",
    "read_key",
    "run_on_loop",
    "run_processes",
    "sending",
    "setting_docs",
    "summarise_repeats",
    "table_named",
]
