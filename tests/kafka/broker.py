"""Run a real Apache Kafka broker (or a 3-node cluster) from Maven Central jars, in KRaft mode, on loopback.

Why this exists: integration tests must talk to a real Kafka, Docker is not available, and CI starts from a
fresh machine. Maven resolves `org.apache.kafka:kafka_2.13` (see pom.xml beside this file) into a cached jar
folder once; each node is then a plain `java -cp DIR/* kafka.Kafka server.properties` process.

By hand:  python -m tests.kafka start            (one broker on 127.0.0.1:9092, Ctrl-C to stop)
          python -m tests.kafka start --nodes 3  (three brokers on 9092, 9094, 9096)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.kafka.certs import Certificates, make_certificates

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).resolve().parent
CACHE_ROOT = Path(os.environ.get("ENGINE_KAFKA_CACHE", Path.home() / ".cache" / "engine-kafka"))
# The JVM options of the test suite's short-lived JVMs (brokers, Kafka Streams, Spark): C1 only (C2's
# compiler threads cost more CPU than a JVM of a few minutes earns back) and the single-threaded collector.
QUICK_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
"""


def resolve_jars(version: str = KAFKA_VERSION) -> Path:
    """Resolve the broker jars with Maven once; later calls reuse the cached folder."""
    target = CACHE_ROOT / version
    marker = target / ".complete"
    if marker.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mvn", "-q", "-B", "-f", str(HERE / "pom.xml"),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={target}",
        ],
        check=True,
    )
    marker.touch()
    return target


# Security a cluster can be started with: its listener's name and protocol.
SECURITY = {"plaintext": "PLAINTEXT", "sasl_plaintext": "SASL_PLAINTEXT", "ssl": "SSL",
            "sasl_ssl": "SASL_SSL"}
ADMIN = ("admin", "admin-secret")  # a super user
USERS = (ADMIN, ("app", "app-secret"))  # SCRAM-SHA-512 users of a secured cluster


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir / "broker.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class KafkaCluster:
    """One or three KRaft nodes in combined broker+controller mode with a static quorum."""

    def __init__(
        self,
        nodes: int = 1,
        *,
        ports: list[int] | None = None,
        root: Path | None = None,
        heap: str = "512m",
        cpus: str | None = None,
        security: str = "plaintext",
        peak: bool = False,
    ) -> None:
        if nodes not in (1, 3):
            raise ValueError(f"nodes must be 1 or 3, not {nodes}")
        if security not in SECURITY:
            raise ValueError(f"security must be one of {sorted(SECURITY)}, not {security!r}")
        self.security = security
        self.certificates: Certificates | None = None  # made at start, for ssl and sasl_ssl
        self.jars = resolve_jars()
        self._own_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="engine-kafka-"))
        self.heap = heap
        self.cpus = cpus  # e.g. "1": pin the JVMs (taskset) so benchmarks don't share a core with them
        # A test's broker lives minutes and mostly waits: the quick compiler alone and the serial collector
        # spare the cores the tests share; a benchmark's broker (`peak`) gets the full JIT and G1.
        self.jvm_options = ["-XX:+UseG1GC"] if peak else QUICK_JVM
        ports = ports or [free_port() for _ in range(nodes)]
        self.nodes = [
            Node(i + 1, ports[i], free_port(), self.root / f"node-{i + 1}") for i in range(nodes)
        ]
        self.cluster_id = uuid.uuid4().hex[:22]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    @property
    def url(self) -> str:
        return "kafka://" + self.bootstrap

    def _properties(self, node: Node) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        replication = len(self.nodes)
        min_isr = 2 if replication == 3 else 1
        listener = SECURITY[self.security]
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node.node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners={listener}://127.0.0.1:{node.port},"
                f"CONTROLLER://127.0.0.1:{node.controller_port}",
                f"advertised.listeners={listener}://127.0.0.1:{node.port}",
                "controller.listener.names=CONTROLLER",
                f"listener.security.protocol.map={listener}:{listener},CONTROLLER:PLAINTEXT",
                f"inter.broker.listener.name={listener}",
                *self._security_properties(),
                f"log.dirs={node.data_dir / 'data'}",
                "num.partitions=1",
                f"default.replication.factor={replication}",
                f"offsets.topic.replication.factor={replication}",
                "offsets.topic.num.partitions=4",
                f"transaction.state.log.replication.factor={replication}",
                f"transaction.state.log.min.isr={min_isr}",
                f"min.insync.replicas={min_isr}",
                "group.initial.rebalance.delay.ms=0",
                # Fault tests use short sessions (ENGINE_SESSION_TIMEOUT) and transaction timeouts, and
                # the broker checks for timed-out transactions each second instead of each 10.
                "group.min.session.timeout.ms=1000",
                # Streams groups (KIP-1071): the broker computes assignments; 4.4 enables them for a new
                # cluster (feature streams.version=1 at format). The same test latitude as classic groups:
                # short sessions and heartbeats allowed, no delay before the first assignment.
                "group.streams.min.session.timeout.ms=1000",
                "group.streams.min.heartbeat.interval.ms=100",
                "group.streams.initial.rebalance.delay.ms=0",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
                "auto.create.topics.enable=true",
                "log.segment.bytes=16777216",
                # The tests replay fixed event times (2023, even 1970): with time retention the broker's
                # first retention check, 30 s after it starts, deletes every such record not read yet.
                "log.retention.ms=-1",
                "log.cleaner.backoff.ms=1000",
                "",
            ]
        )

    def _security_properties(self) -> list[str]:
        """SASL/SCRAM and/or TLS with the standard authorizer: the broker itself, its controller listener
        (plaintext on loopback), the SCRAM user ADMIN and the TLS client CN=admin are super users; every
        other user gets only what ACLs grant."""
        if self.security == "plaintext":
            return []
        listener = SECURITY[self.security].lower()
        found = ["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 f"super.users=User:{ADMIN[0]};User:ANONYMOUS;User:CN=admin;User:CN=broker"]
        if self.security.startswith("sasl"):
            jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN[0]}" '
                    f'password="{ADMIN[1]}";')
            found += ["sasl.enabled.mechanisms=SCRAM-SHA-512",
                      "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
                      f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={jaas}"]
        if self.certificates is not None:
            found += ["ssl.keystore.type=PEM", f"ssl.keystore.location={self.certificates.broker_store}",
                      "ssl.truststore.type=PEM", f"ssl.truststore.location={self.certificates.ca}",
                      "ssl.endpoint.identification.algorithm=",
                      f"ssl.client.auth={'required' if self.security == 'ssl' else 'none'}"]
        return found

    @property
    def users(self) -> dict[str, str]:
        """The SCRAM-SHA-512 users created at format time (name: password)."""
        return dict(USERS) if self.security.startswith("sasl") else {}

    def _java(self, main: str, *args: str) -> list[str]:
        pin = ["taskset", "-c", self.cpus] if self.cpus else []
        return [
            *pin,
            "java", f"-Xmx{self.heap}", "-Xms128m", *self.jvm_options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            "-cp", f"{self.jars}/*", main, *args,
        ]

    def start(self, timeout: float = 90.0) -> KafkaCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.security in ("ssl", "sasl_ssl"):
            self.certificates = make_certificates(self.root / "certificates")
        (self.root / "log4j2.properties").write_text(LOG4J2)
        for node in self.nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            props = node.data_dir / "server.properties"
            props.write_text(self._properties(node))
            scram = [arg for name, password in self.users.items()
                     for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
            subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                           "-c", str(props), "--ignore-formatted", *scram),
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
        for node in self.nodes:
            self._spawn(node)
        self.wait_ready(timeout)
        return self

    def _spawn(self, node: Node) -> None:
        log = node.log_path.open("ab")
        node.process = subprocess.Popen(
            self._java("kafka.Kafka", str(node.data_dir / "server.properties")),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        pending = [n for n in self.nodes if n.running]
        while pending:
            for node in list(pending):
                text = node.log_path.read_text(errors="replace") if node.log_path.exists() else ""
                if "Kafka Server started" in text:
                    pending.remove(node)
                elif not node.running:
                    raise RuntimeError(f"Kafka node {node.node_id} exited:\n{text[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka nodes {[n.node_id for n in pending]} not ready")
            time.sleep(0.2)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would."""
        node = self.nodes[node_id - 1]
        if node.process is not None and node.running:
            node.process.kill()
            node.process.wait()

    def shut_down(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM one node and wait for its clean shutdown; one that does not stop within `timeout` is
        killed and TimeoutError raised (a test asking for a clean restart must not get a crash unawares)."""
        node = self.nodes[node_id - 1]
        if node.process is None or not node.running:
            return
        node.process.terminate()
        try:
            node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait()
            raise TimeoutError(f"Kafka node {node_id} did not shut down within {timeout:.0f} s: killed"
                               ) from None

    def restart(self, node_id: int, timeout: float = 90.0, *, crash: bool = True) -> None:
        """Restart one node: killed (SIGKILL, a crash: `crash`), or shut down cleanly (SIGTERM, as for an
        upgrade or a configuration change). A crashed node of a single-node cluster leads its partitions again
        only through an unclean election (docs/rebalances-and-faults.md, "The broker restarting")."""
        node = self.nodes[node_id - 1]
        if crash:
            self.kill(node_id)
        else:
            self.shut_down(node_id)
        node.log_path.write_bytes(b"")
        self._spawn(node)
        deadline = time.monotonic() + timeout
        while "Kafka Server started" not in node.log_path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka node {node_id} did not restart")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every node: SIGKILL when its data is deleted right after anyway (a clean shutdown of a KRaft
        node takes seconds and keeps nothing), else SIGTERM, and SIGKILL after 20 s."""
        how = signal.SIGKILL if self._own_root else signal.SIGTERM
        for node in self.nodes:
            if node.process is not None and node.running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, how)
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
