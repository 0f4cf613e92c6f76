"""The registry behind TLS (a client certificate required) and basic auth, as production registries are:
Apicurio (the harness's) behind a TLS-terminating proxy that checks both, written here with aiohttp. A worker
given the CA, its certificate and key and the credentials registers its schemas and round-trips Avro records
through a table; each thing missing or wrong stops its start with one line naming the registry and why."""

from __future__ import annotations

import base64
import ssl
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web

import engine
from engine import testing
from engine.errors import EngineError
from engine.schemas import Avro
from tests.integration.helpers import unique
from tests.kafka.certs import make_certificates

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.kafka.certs import Certificates

pytestmark = pytest.mark.kafka  # (a real registry: Java, started by the harness)

USER, PASSWORD = "engine", "s3cret"


@dataclass
class Sale:
    item: str
    qty: int


@dataclass
class Secured:
    url: str  # the proxy's Confluent API, https
    certificates: Certificates
    authorized: list[str]  # the paths of the requests it let through


@pytest.fixture
async def secured(schema_registry: str, tmp_path: Any) -> AsyncIterator[Secured]:
    """A proxy on 127.0.0.1 that speaks TLS, requires a client certificate signed by the test CA and basic
    auth, and forwards what passes to the registry."""
    certificates = make_certificates(tmp_path / "certificates")
    upstream = schema_registry.rstrip("/")
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    authorized: list[str] = []
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != expected:
            return web.json_response({"error_code": 40101, "message": "Unauthorized"}, status=401)
        authorized.append(request.path)
        path = request.path_qs.removeprefix("/apis/ccompat/v7")
        headers = {name: value for name, value in request.headers.items()
                   if name.lower() in ("content-type", "accept")}
        async with session.request(request.method, upstream + path, data=await request.read(),
                                   headers=headers) as answer:
            return web.Response(body=await answer.read(), status=answer.status,
                                content_type=answer.content_type)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates.ca))
    context.verify_mode = ssl.CERT_REQUIRED
    key_and_cert = certificates.broker_store  # (the broker's key and certificate, for 127.0.0.1)
    context.load_cert_chain(str(key_and_cert))
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # (the port the OS chose)
    try:
        yield Secured(f"https://127.0.0.1:{port}/apis/ccompat/v7", certificates, authorized)
    finally:
        await runner.cleanup()
        await session.close()


def sales_app(app_id: str) -> tuple[engine.App, engine.Topic, engine.Table]:
    app = engine.App(app_id)
    sales = app.topic("sales", key_type=str, value_type=Sale, value_serializer=Avro(record_name="shop.Sale"))
    sold = app.Table("sold", default=int, key_type=str, value_type=int)

    @app.agent(sales)
    async def count(stream: Any) -> None:
        async for item, sale in stream.items():
            sold[item] += sale.qty

    return app, sales, sold


def registry_settings(secured: Secured, **changes: Any) -> dict[str, Any]:
    certificates = secured.certificates
    settings = {"schema_registry_url": secured.url, "schema_registry_auth": f"{USER}:{PASSWORD}",
                "schema_registry_cafile": str(certificates.ca),
                "schema_registry_certfile": str(certificates.client_cert),
                "schema_registry_keyfile": str(certificates.client_key)}
    return {**settings, **changes}


async def test_a_worker_registers_and_reads_avro_through_tls_and_basic_auth(secured: Secured) -> None:
    app, sales, sold = sales_app(unique("secured"))
    sent = [("tea", 2), ("cake", 1), ("tea", 5), ("pie", 3)]
    async with testing.running(app, broker=testing.memory_url(), **registry_settings(secured)):
        for item, qty in sent:
            await sales.send(key=item, value=Sale(item, qty))
        truth: Counter[str] = Counter()
        for item, qty in sent:
            truth[item] += qty
        await testing.eventually(lambda: dict(sold.items()) == dict(truth), 15)
    assert any(path.endswith("/subjects/sales-value/versions") for path in secured.authorized), \
        secured.authorized


@pytest.mark.parametrize(("change", "says"), [
    ({"schema_registry_auth": f"{USER}:wrong"}, "refused the credentials"),
    ({"schema_registry_auth": None}, "refused the credentials"),
    ("other_ca", "unreachable"),
    ({"schema_registry_certfile": None, "schema_registry_keyfile": None}, "unreachable"),
])
async def test_what_is_missing_or_wrong_stops_the_start_naming_the_registry(
        secured: Secured, change: Any, says: str) -> None:
    changes = ({"schema_registry_cafile": str(secured.certificates.other_ca)} if change == "other_ca"
               else change)
    app, _, _ = sales_app("secured-refused")
    with pytest.raises(EngineError, match=rf"schema registry at {secured.url}.*{says}"):
        async with testing.running(app, broker=testing.memory_url(), **registry_settings(secured, **changes)):
            pass
