"""Starting and stopping aiokafka's clients, and what their failures to connect mean: a broker that does
not answer, one that refuses this client (credentials, TLS, an ACL missing, with what to grant), and
engine's settings as aiokafka's client options.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any

import aiokafka.admin  # noqa: F401  # (imported for its logger: `client_loggers` finds it from here)
from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context

from engine.errors import (
    BrokerRefused,
    BrokerUnavailable,
)
from engine.transport.kafka_errors import read_failed, retriable

if TYPE_CHECKING:
    from collections.abc import Mapping


log = logging.getLogger(__name__)


GROUP_NOT_LEFT = "without leaving the group: its partitions move after the session timeout"


async def stop_quietly(client: Any, what: str, within: float | None = None,
                        left: str = GROUP_NOT_LEFT) -> None:
    """Stop an aiokafka client, in at most `within` seconds if given (then said at WARNING, with what was
    `left` undone). aiokafka's stop awaits its own cancelled fetch tasks and can let their CancelledError out
    (seen with a broker down); that must not look like *our* task being cancelled."""
    try:
        async with asyncio.timeout(within):
            await client.stop()
    except TimeoutError:
        log.warning("the %s did not stop within %.0f s (the broker it needs unreachable?); stopped %s",
                    what, within, left)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we really are being cancelled
        log.warning("aiokafka %s raised CancelledError while stopping; ignored", what)


# What the broker's authorizer refuses, by aiokafka's error: the kind of resource an ACL is missing on, and
# what an engine worker needs granted on it.
NOT_AUTHORIZED = {
    GroupAuthorizationFailedError: ("the consumer group", "Read on the group (named by the app id)"),
    TopicAuthorizationFailedError: ("a topic", "Describe and Read on a topic the app reads, and Create on "
                                    "one it makes (or create it first)"),
    TransactionalIdAuthorizationFailed: ("a transactional id", "Write and Describe on the transactional ids "
                                         "prefixed with the app id (one per task, one per worker)"),
    ClusterAuthorizationFailedError: ("the cluster", "IdempotentWrite on the cluster"),
}


async def start_client(client: Any, servers: str, options: Mapping[str, Any], stop: str = "stop") -> None:
    """Start an aiokafka client (stopped again by its method `stop` if that fails); no broker is a
    BrokerUnavailable that says what to do, a broker that refuses this client a BrokerRefused that says
    what."""
    try:
        await client.start()
    except KafkaConnectionError as exc:
        await getattr(client, stop)()
        raise await unavailable(servers, options, exc) from exc
    except tuple(NOT_AUTHORIZED) as exc:
        await getattr(client, stop)()
        raise not_authorized(servers, options, exc) from exc
    except KafkaError as exc:  # (a broker that went away mid-start: a task's set-up waits that out)
        if not retriable(exc):
            raise
        await getattr(client, stop)()
        raise read_failed(f"cannot start a Kafka client of {servers!r}", exc) from exc


def not_authorized(servers: str, options: Mapping[str, Any], exc: BaseException, *,
                    what: str | None = None) -> BrokerRefused:
    """`what`: the resource refused, where the error alone does not say which."""
    kind, needs = next(found for error, found in NOT_AUTHORIZED.items() if isinstance(exc, error))
    what = what or kind
    user = options.get("sasl_plain_username") or "this client"
    return BrokerRefused(f"the Kafka broker at {servers!r} did not authorize {user!r} for {what} "
                         f"({type(exc).__name__}: {exc}); grant it {needs}")


# The options of a connection's security, as aiokafka's create_conn takes them.
_CONNECTION_OPTIONS = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
                       "sasl_plain_password")


async def unavailable(servers: str, options: Mapping[str, Any], exc: BaseException) -> BrokerUnavailable:
    """Why no client could bootstrap: aiokafka says only "Unable to bootstrap" (the cause is in its log),
    so one connection is tried again to tell a broker that refuses these credentials or this TLS from one
    that is not there. The message never holds the password."""
    host, _, port = servers.split(",")[0].rpartition(":")
    try:
        conn = await create_conn(host, int(port), request_timeout_ms=10_000,
                                 **{k: v for k, v in options.items() if k in _CONNECTION_OPTIONS})
    except (SaslAuthenticationFailed, UnsupportedSaslMechanismError) as refused:
        user = options.get("sasl_plain_username")
        return BrokerRefused(
            f"the Kafka broker at {servers!r} refused user {user!r} ({type(refused).__name__}: "
            f"{refused}); check sasl_username, sasl_password and sasl_mechanism "
            f"({options.get('sasl_mechanism')!r}), ENGINE_SASL_* or the CLI's options")
    except ssl.SSLError as refused:
        return BrokerRefused(
            f"TLS with the Kafka broker at {servers!r} failed ({refused}); check ssl_cafile (the CA that "
            "signed the broker's certificate) and ssl_certfile/ssl_keyfile")
    except Exception:  # still nothing there: the original error says it
        pass
    else:
        conn.close()
    return BrokerUnavailable(f"no Kafka broker answered at {servers!r} ({exc}); is Kafka running?")


def client_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka's options from engine's (Settings.client_options): SASL credentials under aiokafka's names
    (for PLAIN and SCRAM alike), TLS files as an SSL context; any other option as it is."""
    found = dict(options)
    renamed = {"sasl_username": "sasl_plain_username", "sasl_password": "sasl_plain_password"}
    for ours, theirs in renamed.items():
        if ours in found:
            found[theirs] = found.pop(ours)
    files = {name: found.pop(f"ssl_{name}", None) for name in ("cafile", "certfile", "keyfile")}
    if any(files.values()) or (found.get("security_protocol") in ("SSL", "SASL_SSL")
                               and "ssl_context" not in found):
        found["ssl_context"] = create_ssl_context(**files)
    return found


def client_loggers() -> list[logging.Logger]:
    """aiokafka's loggers: one per module of aiokafka that logs (client.py logs as `aiokafka`), made when the
    module is imported, so every module this transport's clients use has its logger once this module is."""
    return [logger for name, logger in logging.Logger.manager.loggerDict.items()
            if name.partition(".")[0] == "aiokafka" and isinstance(logger, logging.Logger)]
