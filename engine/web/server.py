"""The worker's web server (aiohttp lives here and only here): table queries routed to the owner of the key,
health and readiness.

    GET /health                 200 while the worker runs (a liveness probe), with the app's id
    GET /ready                  200 once every partition assigned here is recovered, else 503
    GET /status                 its tasks, stores' changelog positions and late events (engine status)
    GET /metrics                the worker's metrics in Prometheus' text format (engine.monitors.readings)
    GET /tables                 the app's tables: kind, partition count, partitions active here
    GET /tables/{table}/{key}   the key's value as JSON; 404 if absent, 400 for a key of the wrong type,
                                503 with Retry-After while its partition recovers or moves;
                                ?window=latest|all|<start> a windowed table's windows (default latest)
                                ?stale=ok may read a standby's copy here instead of asking the owner
    GET /tables/{table}?from=&to=&limit=
                                keys from `from` to `to` (both included, either may be left out) in the
                                order of their bytes, at most `limit` (100); `next` is the `from` of the next
                                page. Every owner is asked for its partitions and the answers are merged.
    POST /export                {"tables": NAME or "all", "target": LAKE TABLE, "wait": SECONDS}: an export
                                round now (engine.export.rounds: every worker's partitions, one version);
                                every other worker is asked for the same round; the answer is each
                                worker's part, by endpoint (`engine export --live`)
    POST /group/heartbeat       heartbeat to the streams group now (another member's change may have
                                moved tasks: engine.transport.kafka_streams_member asks, `ask_to_beat`)
    GET /                       the app's page (engine/web/page/: the topology, the group, partitions,
                                tables, dead letters; live, polling /ui/app)
    GET /ui/app                 every view of the page at once, from every worker (engine.web.views)
    GET /ui/<view>              one view as JSON: topology, group, partitions, tables, dead-letters
    GET /ui/worker              this worker's part of them (engine.runtime.overview), what the others ask

A query for a key another worker owns is forwarded there once (engine.web.queries says when), so any worker
answers for the whole app. The server binds `web_host:web_port`, or the next free port when that one is
taken (two workers on one machine both serve); port 0 takes any free port. Its address goes into the
assignment (the owners map every member hears), which is how the others find it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlencode

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from agents import Service
from engine.codecs import dumps, loads
from engine.errors import ConfigError, EngineError, TableError
from engine.monitors.metrics import CONTENT_TYPE
from engine.tables.versions import Version
from engine.web.queries import RETRY_AFTER, Answer, QueryError, key_text
from engine.web.views import OVERVIEW_KEYS, VIEWS, app_views

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Mapping

    from engine.tables.base import BaseTable
    from engine.web.queries import TableQueries

log = logging.getLogger(__name__)


def _bound_socket(host: str, port: int) -> socket.socket:
    """A socket listening on `host:port` (port 0: one the system picks), for the server. Bound and listening
    here, not in the event loop's `create_server`: two processes choosing the same port can both bind it
    (SO_REUSEADDR, neither listening yet), and only the second one's `listen` fails; uvloop then closes its
    server's socket without raising, and aiohttp failed on a server without a socket (two workers starting
    side by side). Here a port taken is OSError(EADDRINUSE), at the bind or at the listen, on every loop,
    and the next port is tried. The host's first address is the one listened on (it is the one the worker
    announces to the others), an IPv6 one for IPv6 only, as asyncio's servers do."""
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as asyncio's create_server does)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock

FORWARDED = "X-Engine-Forwarded"  # set on a forwarded query: it is answered where it lands, never sent on
FORWARD_TIMEOUT = 5.0  # seconds a forwarded query may take
EXPORT_WAIT = 30.0  # seconds the committer of an asked round waits for the other workers' parts, by default
EXPORT_TIMEOUT = 3600.0  # seconds a worker's part of an asked round may take (it writes the lake table)
BACKLOG = 128  # connections waiting to be accepted (aiohttp's default)
BEAT_ASK_TIMEOUT = 1.0  # seconds another member may take to hear an ask to heartbeat (else: its interval)


@dataclass(frozen=True)
class PageData:
    """What the page shows of this worker: its overview (engine.runtime.overview), and the app's topology
    as a graph (engine.topology.graph)."""

    overview: Callable[[], Awaitable[Mapping[str, Any]]]
    topology: Callable[[], Mapping[str, Any]]


PAGE = Path(__file__).with_name("page")  # the page's files, shipped in the package
PAGE_FILES = {"index.html": "text/html", "page.js": "text/javascript", "page.css": "text/css"}
PAGE_ASK_TIMEOUT = 2.0  # seconds another worker may take to give its overview to the page


class Exports(Protocol):
    """Export rounds asked for over HTTP (engine.export.schedule.AskedExports)."""

    def new_round(self) -> int: ...

    async def run(self, what: str, target: str, round_: int, wait: float) -> dict[str, Any]: ...
PORTS_TRIED = 100  # taken ports skipped before giving up


class WebServer(Service):
    def __init__(self, app_id: str, queries: TableQueries, host: str, port: int,
                 on_bound: Callable[[str], None] = lambda endpoint: None,
                 metrics: Callable[[], Awaitable[bytes]] | None = None,
                 status: Callable[[], Awaitable[Mapping[str, Any]]] | None = None,
                 exports: Exports | None = None,
                 on_beat_asked: Callable[[], None] = lambda: None,
                 page: PageData | None = None) -> None:
        super().__init__("web")
        self._page = page
        self._page_files: dict[str, bytes] = {}
        self._on_beat_asked = on_beat_asked
        self.app_id = app_id
        self.queries = queries
        self._metrics = metrics
        self._status = status
        self._exports = exports
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
        app.router.add_get("/status", self._status_json)
        app.router.add_get("/tables", self._tables)
        app.router.add_get("/tables/{table}", self._range)
        app.router.add_get("/tables/{table}/{key}", self._get)
        app.router.add_post("/export", self._export)
        app.router.add_post("/group/heartbeat", self._beat)
        if self._page is not None:
            app.router.add_get("/", self._page_file)
            app.router.add_get("/page/{name}", self._page_file)
            app.router.add_get("/ui/worker", self._worker_overview)
            app.router.add_get("/ui/{view}", self._view)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._client = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT))
        ports = [0] if self.port == 0 else range(self.port, min(self.port + PORTS_TRIED, 65536))
        for port in ports:
            try:
                sock = _bound_socket(self.host, port)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise ConfigError(f"web server cannot listen on {self.host}:{port}: {exc}") from exc
                continue
            try:
                await web.SockSite(self._runner, sock).start()
            except BaseException:
                sock.close()
                raise
            bound = sock.getsockname()[1]
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
        return _json(200, {"status": "alive", "app": self.app_id, "worker": self.endpoint})

    async def _beat(self, request: web.Request) -> web.Response:
        self._on_beat_asked()
        return _json(202, {"heartbeat": "asked"})

    async def _ready(self, request: web.Request) -> web.Response:
        return _respond(self.queries.ready())

    async def _metrics_text(self, request: web.Request) -> web.Response:
        if self._metrics is None:
            return _json(404, {"error": "this worker reports no metrics"})
        response = web.Response(body=await self._metrics())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    async def _status_json(self, request: web.Request) -> web.Response:
        if self._status is None:
            return _json(404, {"error": "this worker reports no status"})
        return _json(200, await self._status())

    async def _page_file(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        if name not in PAGE_FILES:
            return _json(404, {"error": f"no page file {name!r}"})
        if name not in self._page_files:  # (read once: the package does not change under a running worker)
            self._page_files[name] = await asyncio.to_thread((PAGE / name).read_bytes)
        return web.Response(body=self._page_files[name], content_type=PAGE_FILES[name],
                            headers={"Cache-Control": "no-cache"})

    async def _worker_overview(self, request: web.Request) -> web.Response:
        assert self._page is not None
        return _json(200, await self._page.overview())

    async def _view(self, request: web.Request) -> web.Response:
        """One view of the page (or all of them: `app`), from every worker of the group, asked at once."""
        assert self._page is not None
        view = request.match_info["view"]
        if view != "app" and view not in VIEWS:
            return _json(404, {"error": f"no view {view!r}; views: app, {', '.join(VIEWS)}"})
        if view == "topology":  # (the same on every worker: nobody else is asked)
            return _json(200, self._page.topology())
        others = self.queries.other_workers()
        here, *answers = await asyncio.gather(self._page.overview(), *(
            self.forward(endpoint, "/ui/worker", timeout=PAGE_ASK_TIMEOUT) for endpoint in others))
        overviews, unreachable = [here], {}
        for endpoint, (status, raw) in zip(others, answers, strict=True):
            overview, why = _overview_in(status, raw)
            if overview is not None:
                overviews.append(overview)
            else:
                unreachable[endpoint] = why
        views = app_views(self._page.topology(), overviews, unreachable)
        return _json(200, views if view == "app" else views[view])

    async def _tables(self, request: web.Request) -> web.Response:
        return _respond(self.queries.list_tables())

    async def _get(self, request: web.Request) -> web.Response:
        forwarded = FORWARDED in request.headers
        query = request.rel_url.query
        times = {name: query[name] for name in ("as_of", "from", "to") if name in query}
        answer = self.queries.get(request.match_info["table"], request.match_info["key"], forwarded=forwarded,
                                  window=query.get("window"), stale=query.get("stale") == "ok", times=times)
        if isinstance(answer, Answer):
            return _respond(answer)
        status, body = await self.forward(answer.endpoint, request.rel_url.path_qs)
        return web.Response(status=status, body=body, content_type="application/json",
                            headers={"Retry-After": str(RETRY_AFTER)} if status == 503 else None)

    async def _range(self, request: web.Request) -> web.Response:
        """A range: this worker's partitions read here, every other owner's asked of it, merged."""
        queries, query = self.queries, request.rel_url.query
        try:
            table = queries.table(request.match_info["table"])
            asked = queries.range_of(table, query.get("from"), query.get("to"), query.get("limit"),
                                     stale=query.get("stale") == "ok")
            wanted = queries.partitions_of(table, query.get("partitions"))
        except QueryError as exc:
            return _respond(exc.answer)
        page = queries.scan_here(table, wanted, asked)
        if FORWARDED in request.headers:  # the asker merges: keys with their bytes, and what is not here
            return _json(200, {"entries": [[raw.decode(), key, value] for raw, key, value in page.entries],
                               "missing": _by_number(page.missing)})
        entries, missing = page.entries, dict(page.missing)
        elsewhere = queries.owners_of(missing)
        unowned = elsewhere.pop("", [])
        params = {k: v for k, v in query.items() if k != "partitions"}
        owners = list(elsewhere.items())
        replies = await asyncio.gather(*(  # every other owner at once
            self.forward(endpoint, f"/tables/{quote(table.name, safe='')}?"
                                   f"{urlencode({**params, 'partitions': ','.join(map(str, numbers))})}")
            for endpoint, numbers in owners))
        for (_, numbers), (status, raw) in zip(owners, replies, strict=True):
            if status != 200:
                continue  # still missing: a 503 below
            body = loads(raw)
            entries.extend((text.encode(), key, value) for text, key, value in body["entries"])
            for number in numbers:
                if str(number) not in body["missing"]:
                    missing.pop(number, None)
        for number in unowned:
            missing.setdefault(number, "moving")
        if missing:
            return _json(503, {"error": f"partitions of table {table.name!r} are moving or recovering: "
                                        f"{dict(sorted(missing.items()))}", "missing": _by_number(missing)},
                         retry_after=RETRY_AFTER)
        entries.sort(key=lambda entry: entry[0])
        more = entries[asked.limit] if len(entries) > asked.limit else None
        shown = [{"key": key, "value": value} for _, key, value in entries[:asked.limit]]
        return _json(200, {"table": table.name, "entries": shown,
                           "next": more[0].decode() if more is not None else None})

    async def _export(self, request: web.Request) -> web.Response:
        """An export round: this worker's part, and, unless the request was forwarded, every other worker's
        (asked at once, for the same round), by endpoint."""
        if self._exports is None:
            return _json(404, {"error": "this worker takes no export requests"})
        try:
            body = loads(await request.read())
            what, target = str(body["tables"]), str(body["target"])
            wait = float(body.get("wait", EXPORT_WAIT))
            forwarded = FORWARDED in request.headers
            round_ = int(body["round"]) if forwarded else self._exports.new_round()
        except (ValueError, TypeError, KeyError) as exc:
            return _json(400, {"error": f"an export request is JSON with tables, target and wait: {exc!r}"})
        asked = {"tables": what, "target": target, "wait": wait, "round": round_}
        others = [] if forwarded else self.queries.other_workers()
        parts = await asyncio.gather(self._export_here(what, target, round_, wait),
                                     *(self._forward_export(endpoint, asked) for endpoint in others))
        workers = dict(zip([self.endpoint, *others], parts, strict=True))
        return _json(200, {"round": round_, "workers": workers})

    async def _export_here(self, what: str, target: str, round_: int, wait: float) -> dict[str, Any]:
        assert self._exports is not None
        try:
            return {"tables": await self._exports.run(what, target, round_, wait)}
        except EngineError as exc:
            log.warning("export round %d to %s failed here: %s", round_, target, exc)
            return {"error": str(exc)}
        except Exception as exc:  # (a library's own error: the asker hears of it, the log has its trace)
            log.exception("export round %d to %s failed here", round_, target)
            return {"error": f"{type(exc).__name__}: {exc}"}

    async def _forward_export(self, endpoint: str, asked: Mapping[str, Any]) -> dict[str, Any]:
        """Another worker's part of an export round: its answer, or the error it gave."""
        assert self._client is not None
        try:
            async with self._client.post(f"http://{endpoint}/export", data=dumps(asked),
                                         headers={FORWARDED: self.endpoint},
                                         timeout=ClientTimeout(total=EXPORT_TIMEOUT)) as reply:
                answer = loads(await reply.read())
        except (ClientError, TimeoutError, ValueError) as exc:
            return {"error": f"{endpoint} did not answer: {exc!r}"}
        parts = answer.get("workers", {}) if isinstance(answer, dict) else {}
        return parts.get(endpoint) or {"error": answer.get("error", f"status {reply.status}")}

    async def forward(self, endpoint: str, path: str, timeout: float = FORWARD_TIMEOUT) -> tuple[int, bytes]:
        """Ask the worker at `endpoint` (marked as forwarded: it answers, never sends on); a worker that does
        not answer is a 503, as a partition that moves."""
        assert self._client is not None
        try:
            headers = {FORWARDED: self.endpoint}
            async with self._client.get(f"http://{endpoint}{path}", headers=headers,
                                        timeout=ClientTimeout(total=timeout)) as reply:
                return reply.status, await reply.read()
        except (ClientError, TimeoutError) as exc:
            return 503, dumps({"error": f"the owner {endpoint} did not answer: {exc!r}"})

    async def query(self, table: BaseTable, key: Any, times: Mapping[str, str] | None = None) -> Any:
        """`table.query(key)`: the value from here or from the key's owner; KeyError if absent, TableError
        for anything else (moving, recovering, a key of the wrong type), with the worker's reason. `times`:
        a versioned table's `as_of`, `from` and `to` (then its versions, as `Version`s, for a range)."""
        answer = self.queries.get_key(table, key, forwarded=False, times=times)
        if isinstance(answer, Answer):
            status, body = answer.status, answer.body
        else:
            path = f"/tables/{quote(table.name, safe='')}/{quote(key_text(table, key), safe='')}"
            if times:
                path += f"?{urlencode(times)}"
            status, raw = await self.forward(answer.endpoint, path)
            body = loads(raw)
        if status == 200:
            if "windows" in body:
                return body["windows"]
            decode = table.row_codec.decode
            if "versions" in body:
                return [Version(decode(dumps(v["value"])), v["valid_from"], v["valid_to"])
                        for v in body["versions"]]
            return decode(dumps(body["value"]))  # the value's own type, as a read gives it
        if status == 404 and "key" in body:
            raise KeyError(key)
        raise TableError(f"table {table.name!r}, key {key!r}: {body.get('error', status)}")


async def ask_worker(url: str, path: str, body: Any = None, timeout: float = FORWARD_TIMEOUT
                     ) -> tuple[int, Any] | None:
    """GET `path` of the worker serving at `url` (http://host:port), or POST `body` to it as JSON: (status,
    its JSON body), or None when nothing answers there (the CLI asks a running worker this way)."""
    try:
        async with ClientSession(timeout=ClientTimeout(total=timeout)) as session, \
                session.request("GET" if body is None else "POST", url.rstrip("/") + path,
                                data=None if body is None else dumps(body)) as reply:
            return reply.status, loads(await reply.read())
    except (ClientError, TimeoutError, OSError):
        return None


async def ask_to_beat(endpoints: Collection[str]) -> None:
    """Ask the workers at `endpoints` to heartbeat to their streams group now, all at once, waiting at most
    BEAT_ASK_TIMEOUT: one that does not answer hears of the change at its next heartbeat anyway."""
    await asyncio.gather(*(ask_worker(f"http://{endpoint}", "/group/heartbeat", {}, BEAT_ASK_TIMEOUT)
                           for endpoint in endpoints))
    log.debug("asked %s to heartbeat now", ", ".join(endpoints))


def _overview_in(status: int, raw: bytes) -> tuple[Mapping[str, Any] | None, str]:
    """Another worker's answer to `/ui/worker`: its overview, or None and why there is none (it did not
    answer, answered with an error, or with something else than an overview: another version of engine)."""
    try:
        body = loads(raw) if raw else None
    except ValueError:
        body = None
    if status == 200 and isinstance(body, dict) and body.keys() >= OVERVIEW_KEYS:
        return body, ""
    if isinstance(body, dict) and "error" in body:
        return None, str(body["error"])
    return None, f"answered {status} without the page's overview" if status == 200 else f"answered {status}"


def _by_number(missing: dict[int, str]) -> dict[str, str]:
    """Partitions not read, as JSON has them (keys are text)."""
    return {str(number): why for number, why in sorted(missing.items())}


def _respond(answer: Answer) -> web.Response:
    return _json(answer.status, answer.body, retry_after=answer.retry_after)


def _json(status: int, body: Any, retry_after: int | None = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(status=status, body=dumps(body), content_type="application/json", headers=headers)
