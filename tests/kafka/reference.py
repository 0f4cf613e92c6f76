"""Kafka Streams itself as a reference: the app in `reference/Reference.java`, built on first use from Maven
Central jars (like the broker's, see broker.py) and run as a child process, so that differential tests can
compare engine's results with Kafka Streams' own on the same topic.

    with StreamsReference(bootstrap, "ref-app", "session-count", "clicks", "ref-out", 5000, 2000, log=path):
        ...  # wait until group "ref-app" committed the input to its end, then read "ref-out"
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.kafka.broker import CACHE_ROOT, HERE, KAFKA_VERSION, LOG4J2, QUICK_JVM

SOURCE = HERE / "reference" / "Reference.java"


def resolve_reference(version: str = KAFKA_VERSION) -> Path:
    """The compiled reference app (`classes-<source hash>/`, beside `jars/` with Kafka Streams' jars): jars
    resolved with Maven once, the app compiled again only when Reference.java changed."""
    target = CACHE_ROOT / f"streams-{version}"
    jars = target / "jars"
    if not (target / ".complete").exists():
        jars.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(HERE / "reference" / "pom.xml"), f"-Dkafka.version={version}",
             "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={jars}"],
            check=True,
        )
        (target / ".complete").touch()
    classes = target / f"classes-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}"
    if not (classes / "Reference.class").exists():
        building = classes.with_name(classes.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        subprocess.run(["javac", "-d", str(building), "-cp", f"{jars}/*", str(SOURCE)], check=True)
        (target / "log4j2.properties").write_text(LOG4J2)
        building.rename(classes)
    return classes


class StreamsReference:
    """The reference app running `mode` (see Reference.java) as application `app_id`, its output in `log`."""

    def __init__(self, bootstrap: str, app_id: str, mode: str, source: str, output: str, a_ms: int, b_ms: int,
                 *more: str, log: Path) -> None:
        classes = resolve_reference()
        jars = classes.parent / "jars"
        self.log_path = log
        self.app_id = app_id
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                ["java", "-Xmx512m", *QUICK_JVM, "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={classes.parent / 'log4j2.properties'}",
                 "-cp", f"{jars}/*:{classes}", "Reference", bootstrap, app_id, mode, source, output,
                 str(a_ms), str(b_ms), *more],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_running(self, timeout: float = 120) -> None:
        """Wait until Kafka Streams reports RUNNING; fail, with its log, if it stopped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while "RUNNING" not in self.output():
            if self.process.poll() is not None or loop.time() > deadline:
                raise AssertionError(f"Kafka Streams reference not running:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for state in Path(tempfile.gettempdir()).glob(f"reference-{self.app_id}*"):  # Reference.java's
            shutil.rmtree(state, ignore_errors=True)

    def __enter__(self) -> StreamsReference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
