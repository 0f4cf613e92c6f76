"""Secured brokers (tests/kafka: SASL_PLAINTEXT with SCRAM-SHA-512, TLS with client certificates, SASL_SSL;
the standard authorizer): an `engine worker` with a table connects with the right credentials and counts
exactly under both guarantees, set only through ENGINE_* settings; a user with only the ACLs an app needs
runs it; every CLI command works with its security options; a wrong password, an unknown CA and a missing
ACL (the group, the input topic, the transactional ids) each stop the worker at start with one line naming
what was refused and what to grant, the password nowhere in its output."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.integration.helpers import (
    ACL_ALL,
    ACL_CLUSTER,
    ACL_DESCRIBE,
    ACL_GROUP,
    ACL_IDEMPOTENT_WRITE,
    ACL_LITERAL,
    ACL_PREFIXED,
    ACL_READ,
    ACL_TOPIC,
    ACL_TRANSACTIONAL_ID,
    ROOT,
    WorkerProcess,
    consume_until,
    create_topics,
    engine_cli,
    grant,
    latest,
    produce,
    sasl_auth,
    sasl_env,
    unique,
    web_address,
)

pytestmark = pytest.mark.kafka

ADMIN = ("admin", "admin-secret")


def worker_env(app_id: str, topic: str, tmp_path, **settings: str) -> dict[str, str]:
    return {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / "data"),
            "ENGINE_WEB_PORT": "0", **settings}


async def counts_exactly(cluster, app_id: str, topic: str, env: dict[str, str], auth: dict, tmp_path,
                         words: list[str]) -> str:
    """Run an `engine worker` of the counting app with `env` on `cluster`, feed it `words` (as `auth`'s user)
    and check that its table's changelog ends with their exact counts; returns the worker's output."""
    worker = WorkerProcess("tests.integration.table_apps:app", cluster.url, env, tmp_path / "w.log")
    try:
        await worker.wait_for_output("tables ready", 90)
        await produce(cluster.bootstrap, topic, [(w, 1) for w in words], auth=auth)
        records = await consume_until(cluster.bootstrap, f"{app_id}-counts-changelog",
                                      lambda rs: latest(rs) == dict(Counter(words)), timeout=120, auth=auth)
        assert latest(records) == dict(Counter(words))
    finally:
        assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
    return worker.output()


def refused(cluster, env: dict[str, str], tmp_path) -> tuple[str, str]:
    """Start an `engine worker` the broker refuses: it must stop by itself, failing; (its last line, all
    its output)."""
    worker = WorkerProcess("tests.integration.table_apps:app", cluster.url, env, tmp_path / "w.log")
    code = worker.process.wait(timeout=120)
    output = worker.output()
    assert code != 0, output[-3000:]
    return output.strip().splitlines()[-1], output


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_with_a_table_counts_exactly_on_a_secured_broker(secured_kafka, tmp_path, guarantee):
    auth = sasl_auth(*ADMIN)
    app_id, topic = unique("secured"), unique("words")
    await create_topics(secured_kafka.bootstrap, [topic], auth=auth)
    env = worker_env(app_id, topic, tmp_path, ENGINE_PROCESSING_GUARANTEE=guarantee, **sasl_env(*ADMIN))
    output = await counts_exactly(secured_kafka, app_id, topic, env, auth, tmp_path,
                                  [f"s{i % 30}" for i in range(900)])
    assert ADMIN[1] not in output


async def test_a_wrong_password_stops_the_worker_at_start_with_one_clear_line(secured_kafka, tmp_path):
    wrong = "not-the-password"
    last, output = refused(secured_kafka, worker_env(unique("refused"), unique("words"), tmp_path,
                                                     **sasl_env(ADMIN[0], wrong)), tmp_path)
    assert last.startswith("engine: the Kafka broker at "), output[-3000:]
    assert "refused user 'admin'" in last
    assert "SaslAuthenticationFailed" in last
    assert "check sasl_username, sasl_password and sasl_mechanism ('SCRAM-SHA-512')" in last
    assert "is Kafka running" not in output
    assert wrong not in output


async def test_the_cli_sends_with_its_security_options_and_the_password_from_the_environment(secured_kafka):
    topic = unique("cli-secured")
    await create_topics(secured_kafka.bootstrap, [topic], auth=sasl_auth(*ADMIN))
    command = [sys.executable, "-m", "cli.main", "send", "-A", "examples.wordcount:app",
               "--broker", secured_kafka.url, "--security-protocol", "SASL_PLAINTEXT",
               "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", ADMIN[0], topic, "hello"]
    env = {**os.environ, "ENGINE_SASL_PASSWORD": ADMIN[1]}
    result = await asyncio.to_thread(subprocess.run, command, cwd=ROOT, env=env, capture_output=True,
                                     text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"sent to {topic}["), result.stdout
    records = await consume_until(secured_kafka.bootstrap, topic, lambda rs: len(rs) >= 1,
                                  auth=sasl_auth(*ADMIN))
    assert [r.value for r in records] == [b'"hello"']


def tls_env(cluster, ca=None) -> dict[str, str]:
    certs = cluster.certificates
    return {"ENGINE_SECURITY_PROTOCOL": "SSL", "ENGINE_SSL_CAFILE": str(ca or certs.ca),
            "ENGINE_SSL_CERTFILE": str(certs.client_cert), "ENGINE_SSL_KEYFILE": str(certs.client_key)}


def tls_auth(cluster) -> dict:
    from aiokafka.helpers import create_ssl_context

    certs = cluster.certificates
    return {"security_protocol": "SSL", "ssl_context": create_ssl_context(
        cafile=str(certs.ca), certfile=str(certs.client_cert), keyfile=str(certs.client_key))}


async def test_a_worker_counts_over_tls_with_a_client_certificate(tls_kafka, tmp_path):
    auth = tls_auth(tls_kafka)
    app_id, topic = unique("tls"), unique("words")
    await create_topics(tls_kafka.bootstrap, [topic], auth=auth)
    await counts_exactly(tls_kafka, app_id, topic, worker_env(app_id, topic, tmp_path, **tls_env(tls_kafka)),
                         auth, tmp_path, [f"t{i % 20}" for i in range(400)])


async def test_an_unknown_ca_stops_the_worker_at_start_with_one_clear_line(tls_kafka, tmp_path):
    env = worker_env(unique("tls-refused"), unique("words"), tmp_path,
                     **tls_env(tls_kafka, ca=tls_kafka.certificates.other_ca))
    last, output = refused(tls_kafka, env, tmp_path)
    assert last.startswith("engine: TLS with the Kafka broker at "), output[-3000:]
    assert "CERTIFICATE_VERIFY_FAILED" in last
    assert "check ssl_cafile" in last


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_counts_over_sasl_ssl(sasl_tls_kafka, tmp_path, guarantee):
    from aiokafka.helpers import create_ssl_context

    ca = str(sasl_tls_kafka.certificates.ca)
    auth = {**sasl_auth(*ADMIN), "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=ca)}
    app_id, topic = unique("sasl-ssl"), unique("words")
    await create_topics(sasl_tls_kafka.bootstrap, [topic], auth=auth)
    env = worker_env(app_id, topic, tmp_path, ENGINE_PROCESSING_GUARANTEE=guarantee,
                     **{**sasl_env(*ADMIN), "ENGINE_SECURITY_PROTOCOL": "SASL_SSL", "ENGINE_SSL_CAFILE": ca})
    output = await counts_exactly(sasl_tls_kafka, app_id, topic, env, auth, tmp_path,
                                  [f"x{i % 25}" for i in range(500)])
    assert ADMIN[1] not in output


APP_USER = ("app", "app-secret")  # not a super user: it can do what ACLs grant it


async def grant_app(cluster, app_id: str, topic: str, *, without: str | None = None) -> None:
    """What an engine worker of `app_id` reading `topic` needs: its own topics (by prefix), the input, its
    group and its transactional ids (by prefix), idempotent writes; less the ACLs of one resource type
    `without` ("group", "input", "transactional_id")."""
    acls = {"own topics": [(ACL_TOPIC, f"{app_id}-", ACL_PREFIXED, ACL_ALL)],
            "input": [(ACL_TOPIC, topic, ACL_LITERAL, ACL_READ),
                      (ACL_TOPIC, topic, ACL_LITERAL, ACL_DESCRIBE)],
            "transactional_id": [(ACL_TRANSACTIONAL_ID, app_id, ACL_PREFIXED, ACL_ALL)],
            "cluster": [(ACL_CLUSTER, "kafka-cluster", ACL_LITERAL, ACL_IDEMPOTENT_WRITE)],
            "group": [(ACL_GROUP, app_id, ACL_LITERAL, ACL_ALL)]}
    assert without is None or without in acls
    await grant(cluster.bootstrap, sasl_auth(*ADMIN), f"User:{APP_USER[0]}",
                [acl for kind, granted in acls.items() if kind != without for acl in granted])


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_user_with_the_acls_an_app_needs_runs_its_worker(secured_kafka, tmp_path, guarantee):
    auth = sasl_auth(*ADMIN)
    app_id, topic = unique("acl"), unique("words")
    await create_topics(secured_kafka.bootstrap, [topic], auth=auth)
    await grant_app(secured_kafka, app_id, topic)
    env = worker_env(app_id, topic, tmp_path, ENGINE_PROCESSING_GUARANTEE=guarantee, **sasl_env(*APP_USER))
    await counts_exactly(secured_kafka, app_id, topic, env, auth, tmp_path,
                         [f"a{i % 10}" for i in range(300)])


# What the worker's last line says when the ACLs of one resource are missing ({app_id}, {topic} filled in).
REFUSALS = {
    "group": ["did not authorize 'app' for the consumer group", "GroupAuthorizationFailedError: {app_id}",
              "grant it Read on the group"],
    "input": ["did not authorize 'app' for the topic '{topic}'",
              "grant it Describe and Read on a topic the app reads"],
    "transactional_id": ["did not authorize 'app' for a transactional id",
                         "TransactionalIdAuthorizationFailed: {app_id}",
                         "grant it Write and Describe on the transactional ids prefixed with the app id"],
}


@pytest.mark.parametrize("missing", sorted(REFUSALS))
async def test_a_missing_acl_stops_the_worker_at_start_with_one_line_naming_what_to_grant(secured_kafka,
                                                                                          tmp_path, missing):
    app_id, topic = unique(f"acl-no-{missing.replace('_', '-')}"), unique("words")
    await create_topics(secured_kafka.bootstrap, [topic], auth=sasl_auth(*ADMIN))
    await grant_app(secured_kafka, app_id, topic, without=missing)
    env = worker_env(app_id, topic, tmp_path, ENGINE_PROCESSING_GUARANTEE="exactly_once",
                     **sasl_env(*APP_USER))
    last, output = refused(secured_kafka, env, tmp_path)
    assert last.startswith("engine: the Kafka broker at "), output[-3000:]
    for phrase in REFUSALS[missing]:
        assert phrase.format(app_id=app_id, topic=topic) in last
    assert "Traceback" not in output
    assert APP_USER[1] not in output


async def committed_offsets(bootstrap: str, group: str, auth: dict) -> dict:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **auth)
    await admin.start()
    try:
        return {tp: meta.offset for tp, meta in (await admin.list_consumer_group_offsets(group)).items()}
    finally:
        await admin.close()



async def test_every_cli_command_works_on_the_secured_broker_with_its_options(secured_kafka, tmp_path):
    """send (a file of records), topics, status, tables and table get (asking the worker), export from the
    changelog, and reset: each with the CLI's security options, the password only in the environment."""
    pq = pytest.importorskip("pyarrow.parquet", reason="the spark extra: pip install 'engine-streams[spark]'")

    from engine.export.parquet import read_manifest

    auth = sasl_auth(*ADMIN)
    app_id, topic = unique("cli-all"), unique("words")
    await create_topics(secured_kafka.bootstrap, [topic], auth=auth)
    words = [f"c{i % 12}" for i in range(240)]
    truth = dict(Counter(words))
    env = worker_env(app_id, topic, tmp_path)
    worker = WorkerProcess("tests.integration.table_apps:app", secured_kafka.url, {**env, **sasl_env(*ADMIN)},
                           tmp_path / "w.log")
    cli_env = {**os.environ, **env, "ENGINE_SASL_PASSWORD": ADMIN[1]}
    app_args = ("-A", "tests.integration.table_apps:app", "--broker", secured_kafka.url,
                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-512",
                "--sasl-username", ADMIN[0])
    outputs: list[str] = []

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = await asyncio.to_thread(engine_cli, cli_env, *args)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    try:
        await worker.wait_for_output("tables ready", 90)
        lines = tmp_path / "words.jsonl"
        lines.write_text("".join(f'{{"key": "{w}", "value": 1}}\n' for w in words))
        sent = await cli("send", *app_args, topic, "--file", str(lines))
        assert "240" in sent.stdout, sent.stdout
        changelog = f"{app_id}-counts-changelog"
        await consume_until(secured_kafka.bootstrap, changelog, lambda rs: latest(rs) == truth, timeout=120,
                            auth=auth)

        topics = await cli("topics", *app_args)
        assert topic in topics.stdout, topics.stdout
        assert changelog in topics.stdout, topics.stdout
        status = await cli("status", *app_args)
        assert status.stdout.splitlines()[0] == f"group {app_id}: Stable, 1 members", status.stdout
        url = f"http://{web_address(worker)}"
        got = await cli("table", "get", *app_args, "counts", "c1", "--url", url)
        assert got.stdout.strip() == str(truth["c1"])
        tables = await cli("tables", *app_args, "--url", url)
        assert "counts" in tables.stdout, tables.stdout
        exported = tmp_path / "export"
        await cli("export", *app_args, "counts", "--from-changelog", "--to", str(exported))
        manifest = read_manifest(exported)
        rows = [row for f in manifest.files for row in pq.read_table(exported / f.path).to_pylist()]
        assert {row["key"]: row["value"] for row in rows} == truth
    finally:
        assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]

    plan = await cli("reset", *app_args)
    assert f"{topic}[0]: " in plan.stdout, plan.stdout
    assert "nothing done" in plan.stdout, plan.stdout
    await cli("reset", *app_args, "--execute")
    admin_offsets = await committed_offsets(secured_kafka.bootstrap, app_id, auth)
    assert admin_offsets, "the reset committed the input's start"
    assert all(offset == 0 for offset in admin_offsets.values()), admin_offsets
    assert all(ADMIN[1] not in output for output in outputs)
