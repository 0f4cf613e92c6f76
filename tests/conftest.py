"""Session-wide fixtures: a real Kafka broker (a 3-node cluster, a secured broker), started once and stopped
after."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from tests.kafka.broker import KafkaCluster

if TYPE_CHECKING:
    from collections.abc import Iterator


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


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking SASL_PLAINTEXT with SCRAM-SHA-512 users and the standard authorizer."""
    with KafkaCluster(1, security="sasl_plaintext") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def tls_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking TLS with client certificates (made at start) and the standard authorizer."""
    with KafkaCluster(1, security="ssl") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sasl_tls_kafka() -> Iterator[KafkaCluster]:
    """One KRaft broker speaking SASL_SSL: TLS (certificates made at start) and SCRAM-SHA-512 users."""
    with KafkaCluster(1, security="sasl_ssl") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local PySpark session for the whole run (it takes seconds to start), JVM stopped after; it reads
    Delta tables too."""
    from engine.export import local_session, stop_session
    from tests.lake import lake_spark_config

    session = local_session("engine-tests", options=lake_spark_config())
    yield session
    stop_session(session)



@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    """An S3 endpoint (moto's server, in this process) with the bucket S3_BUCKET; yields its URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.lake import S3_BUCKET

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, aws_access_key_id="engine", aws_secret_access_key="secret",
                 region_name="us-east-1").create_bucket(Bucket=S3_BUCKET)
    yield url
    server.stop()
