"""The worker's web server (aiohttp lives here and only here): table queries routed to the owner of the key,
health and readiness.

    GET /health                 200 while the worker runs (a liveness probe)
    GET /ready                  200 once every partition assigned here is recovered, else 503
    GET /metrics                the worker's metrics in Prometheus' text format (engine.monitors.readings)
    GET /tables                 the app's tables: kind, partition count, partitions active here
    GET /tables/{table}/{key}   the key's value as JSON; 404 if absent, 400 for a key of the wrong type,
                                503 with Retry-After while its partition recovers or moves

A query for a key another worker owns is forwarded there once (engine.web.queries says when), so any worker
answers for the whole app. The server binds `web_host:web_port`, or the next free port when that one is
taken (two workers on one machine both serve); port 0 takes any free port. Its address goes into the
assignment (the owners map every member hears), which is how the others find it.
"""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from agents import Service
from engine.codecs import dumps, loads
from engine.errors import ConfigError
from engine.monitors.metrics import CONTENT_TYPE
from engine.tables.base import TableError
from engine.web.queries import key_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from engine.tables.base import BaseTable
    from engine.web.queries import Answer, TableQueries

log = logging.getLogger(__name__)

FORWARDED = "X-Engine-Forwarded"  # set on a forwarded query: it is answered where it lands, never sent on
FORWARD_TIMEOUT = 5.0  # seconds a forwarded query may take
PORTS_TRIED = 100  # taken ports skipped before giving up


class WebServer(Service):
    def __init__(self, queries: TableQueries, host: str, port: int,
                 on_bound: Callable[[str], None] = lambda endpoint: None,
                 metrics: Callable[[], Awaitable[bytes]] | None = None) -> None:
        super().__init__("web")
        self.queries = queries
        self._metrics = metrics
        self._on_bound = on_bound
        self.host = host
        self.port = port
        self.endpoint = ""  # host:port once bound
        self._runner: web.AppRunner | None = None
        self._client: ClientSession | None = None

    async def on_start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics_text)
        app.router.add_get("/tables", self._tables)
        app.router.add_get("/tables/{table}/{key}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._client = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT))
        ports = [0] if self.port == 0 else range(self.port, min(self.port + PORTS_TRIED, 65536))
        for port in ports:
            site = web.TCPSite(self._runner, self.host, port)
            try:
                await site.start()
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise ConfigError(f"web server cannot listen on {self.host}:{port}: {exc}") from exc
                continue
            bound = self._runner.addresses[0][1]
            self.endpoint = f"{self.host}:{bound}"
            self._on_bound(self.endpoint)
            log.info("web server at http://%s (tables, health, ready)", self.endpoint)
            return
        raise ConfigError(f"web server: ports {self.port}-{self.port + PORTS_TRIED - 1} on {self.host} are "
                          "all taken; set web_port")

    async def on_stop(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return _json(200, {"status": "alive", "worker": self.endpoint})

    async def _ready(self, request: web.Request) -> web.Response:
        return _respond(self.queries.ready())

    async def _metrics_text(self, request: web.Request) -> web.Response:
        if self._metrics is None:
            return _json(404, {"error": "this worker reports no metrics"})
        response = web.Response(body=await self._metrics())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    async def _tables(self, request: web.Request) -> web.Response:
        return _respond(self.queries.list_tables())

    async def _get(self, request: web.Request) -> web.Response:
        forwarded = FORWARDED in request.headers
        answer = self.queries.get(request.match_info["table"], request.match_info["key"], forwarded=forwarded)
        if answer.forward_to is None:
            return _respond(answer)
        status, body = await self.forward(answer.forward_to, request.rel_url.path_qs)
        return web.Response(status=status, body=body, content_type="application/json",
                            headers={"Retry-After": "1"} if status == 503 else None)

    async def forward(self, endpoint: str, path: str) -> tuple[int, bytes]:
        """Ask the worker at `endpoint` (marked as forwarded: it answers, never sends on); a worker that does
        not answer is a 503, as a partition that moves."""
        assert self._client is not None
        try:
            headers = {FORWARDED: self.endpoint}
            async with self._client.get(f"http://{endpoint}{path}", headers=headers) as reply:
                return reply.status, await reply.read()
        except (ClientError, TimeoutError) as exc:
            return 503, dumps({"error": f"the owner {endpoint} did not answer: {exc!r}"})

    async def query(self, table: BaseTable, key: Any) -> Any:
        """`table.query(key)`: the value from here or from the key's owner; KeyError if absent, TableError
        for anything else (moving, recovering, a key of the wrong type), with the worker's reason."""
        answer = self.queries.get_key(table, key, forwarded=False)
        status, body = answer.status, answer.body
        if answer.forward_to is not None:
            path = f"/tables/{quote(table.name, safe='')}/{quote(key_text(table, key), safe='')}"
            status, raw = await self.forward(answer.forward_to, path)
            body = loads(raw)
        if status == 200:
            return table.value_codec.decode(dumps(body["value"]))  # the value's own type, as a read gives it
        if status == 404 and "key" in body:
            raise KeyError(key)
        raise TableError(f"table {table.name!r}, key {key!r}: {body.get('error', status)}")


def _respond(answer: Answer) -> web.Response:
    return _json(answer.status, answer.body, retry_after=answer.retry_after)


def _json(status: int, body: Any, retry_after: int | None = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(status=status, body=dumps(body), content_type="application/json", headers=headers)
