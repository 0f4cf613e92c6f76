"""Run a real schema registry from Maven Central, on loopback: Apicurio Registry, whose Confluent-compatible
API (`/apis/ccompat/v7`) is what Confluent's clients, and engine's registry codecs, speak.

Why this exists: the registry codecs (engine.schemas) must be tested against a registry that answers as a
production one does (its ids, its 404 codes, its compatibility refusals), Docker is not available, and CI
starts from a fresh machine. Maven fetches `io.apicurio:apicurio-registry-app:3.0.9:tar.gz:all` (a
ready-to-run Quarkus app that runs on Java 17) into a cached folder once; the registry is then a plain
`java -jar` process with in-memory storage, started with Confluent's default compatibility (BACKWARD, where
Apicurio's own default is NONE). Measured facts: ../shared/notes/schema-registry.md.

By hand:  python -m tests.schema_registry start [--port 8081]   (Ctrl-C to stop)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.kafka.broker import CACHE_ROOT, QUICK_JVM, free_port

APICURIO_VERSION = "3.0.9"  # the newest that runs on Java 17 (3.3.x needs 21)
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
# The registry's parent pom is not on Maven Central: only plugin 2.8's `get` fetches the artifact without it.
MAVEN_GET = "org.apache.maven.plugins:maven-dependency-plugin:2.8:get"
CONFLUENT_API = "/apis/ccompat/v7"


def resolve_registry(version: str = APICURIO_VERSION) -> Path:
    """The registry's runner jar, fetched from Maven Central and unpacked once; later calls reuse it."""
    target = CACHE_ROOT / f"apicurio-{version}"
    marker = target / ".complete"
    if not marker.exists():
        subprocess.run(["mvn", "-q", "-B", MAVEN_GET, f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
                       check=True, stdout=sys.stderr)
        archive = (Path.home() / ".m2" / "repository" / "io" / "apicurio" / "apicurio-registry-app" / version
                   / f"apicurio-registry-app-{version}-all.tar.gz")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        marker.touch()
    runners = sorted(target.rglob("*-runner.jar"))
    if not runners:
        raise FileNotFoundError(f"no runner jar under {target}")
    return runners[0]


class SchemaRegistry:
    """One Apicurio Registry process on 127.0.0.1, in-memory storage; `url` is its Confluent-compatible API
    (what engine's `schema_registry_url` takes)."""

    def __init__(self, port: int | None = None, heap: str = "384m") -> None:
        self.port = port or free_port()
        self.heap = heap
        self.root = Path(tempfile.mkdtemp(prefix="engine-registry-"))
        self.log_path = self.root / "registry.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CONFLUENT_API}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 120.0) -> SchemaRegistry:
        jar = resolve_registry()
        command = [
            "java", f"-Xmx{self.heap}", *QUICK_JVM,
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.otel.sdk.disabled=true", "-Dquarkus.log.level=WARN",
            "-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
            "-Dapicurio.rules.global.compatibility=BACKWARD",
            f"-Djava.io.tmpdir={self.root}", "-jar", str(jar),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                            start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until the Confluent API answers (10-15 s on 2 cores)."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise RuntimeError(f"the schema registry exited:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the schema registry did not answer within {timeout:.0f} s:\n"
                                   f"{self._log_tail()}")
            time.sleep(0.3)

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def pause(self) -> None:
        """SIGSTOP: it keeps its schemas but answers nothing, as behind a network partition (its storage is
        in memory: a restart would forget them)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Kill it (its storage is in memory: nothing to keep) and delete its folder."""
        if self.process is not None and self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
