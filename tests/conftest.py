"""Fixtures: a real Kafka broker, started once per test process and stopped after; per test module (each is
one module's, and idle a JVM costs CPU the rest of the run needs) a 3-node cluster, the secured brokers, a
schema registry and a Spark session; and the group protocol of the workers a test starts.

A test marked `both_protocols` runs twice, its workers members of a streams group (KIP-1071) and of a classic
one: ENGINE_GROUP_PROTOCOL is set for it, which the workers it starts (processes inherit the environment, and
in-process workers read it) take as their `group_protocol`. Other tests leave the setting at `auto`, which the
test broker (Kafka 4.4) answers with the streams protocol."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from tests.kafka.broker import KafkaCluster
from tests.schema_registry import SchemaRegistry

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


PROTOCOLS = ("streams", "classic")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_protocols") is not None:
        metafunc.parametrize("group_protocol", PROTOCOLS)


@pytest.fixture
def group_protocol() -> str | None:
    """The protocol a `both_protocols` test runs under (parametrized); None for the others."""
    return None


@pytest.fixture(autouse=True)
def _group_protocol_env(group_protocol: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if group_protocol is not None:
        monkeypatch.setenv("ENGINE_GROUP_PROTOCOL", group_protocol)


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker on loopback; ENGINE_TEST_KAFKA=host:port uses a broker you started yourself."""
    external = os.environ.get("ENGINE_TEST_KAFKA")
    if external:
        yield _External(external)  # type: ignore[misc]
        return
    with KafkaCluster(1) as cluster:
        yield cluster


class _External:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.url = "kafka://" + bootstrap


@pytest.fixture(scope="module")
def schema_registry() -> Iterator[str]:
    """A real schema registry (Apicurio, tests.schema_registry) on loopback, started once; its Confluent API's
    URL. ENGINE_TEST_SCHEMA_REGISTRY=url uses one you started yourself."""
    external = os.environ.get("ENGINE_TEST_SCHEMA_REGISTRY")
    if external:
        yield external
        return
    with SchemaRegistry() as registry:
        yield registry.url


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def secured_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking SASL_PLAINTEXT with SCRAM-SHA-512 users and the standard authorizer."""
    with KafkaCluster(1, security="sasl_plaintext") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tls_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking TLS with client certificates (made at start) and the standard authorizer."""
    with KafkaCluster(1, security="ssl") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def sasl_tls_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking SASL_SSL: TLS (certificates made at start) and SCRAM-SHA-512 users."""
    with KafkaCluster(1, security="sasl_ssl") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """One local PySpark session per test module (it takes seconds to start), its JVM stopped after the
    module: kept for the whole run, an idle Spark JVM took a fifth of a core in each test process. It reads
    Delta tables too."""
    from engine.export import local_session, stop_session
    from tests.lake import lake_spark_config

    session = local_session("engine-tests", options=lake_spark_config())
    yield session
    stop_session(session)



@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    """An S3 endpoint (moto's server) with the bucket S3_BUCKET; yields its URL. In a process of its own:
    delta-rs holds the GIL while it waits for the store, so a server in this process would never answer."""
    import boto3
    import botocore.exceptions

    from tests.lake import S3_BUCKET

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "moto.log").open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)
    client = boto3.client("s3", endpoint_url=url, aws_access_key_id="engine", aws_secret_access_key="secret",
                          region_name="us-east-1")
    try:
        deadline = time.monotonic() + 60
        while True:  # until it answers (it takes a few seconds to import)
            try:
                client.create_bucket(Bucket=S3_BUCKET)
                break
            except botocore.exceptions.EndpointConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait()
