"""`engine worker --processes N`: N workers of one app on this machine, each its own process, under one
supervisor process, so that a machine's cores all work for the app without a process manager.

Each member is an ordinary `engine worker` process (the command line the CLI gives, run as it is), told in
its environment what sets it apart from the others (`member_environment`): its data dir
`<data_dir>/<index>`, the same for an index across restarts, so that a restarted member finds its stores and
its worker id (its transactional id: it fences what its predecessor left open); its web port, `web_port +
index` (or the next free one, as for any worker; 0 stays 0), which it advertises in the group as any worker
does, so that a query routed by any member reaches the owner of its key; and with a static membership name
(`group_instance_id`), that name suffixed with its index.

The supervisor holds the lock of the app's data dir (engine.lockfile) as a lone worker would, so that a
second supervisor, or a worker, given the same data dir refuses at once. Its members run under an
`agents.Supervisor` (RESTARTS): a member that crashes (exits with another code than 0, or is killed by a
signal) is restarted after a backoff of 1 s, doubled for each further crash within 2 minutes, at most 30 s;
one that crashes a sixth time within 2 minutes is given up (a member that cannot start fails alike every
time: its configuration, its broker), and the supervisor stops the others and exits with status 1. A member
that exits with 0 stopped because it was told to (a SIGTERM of its own): it is not restarted.

SIGTERM or SIGINT to the supervisor sends SIGTERM to every member and waits for them (each stops as a lone
worker does: in-flight events finish, a final checkpoint); a second one kills those still running. The
supervisor exits with 0 once every member stopped cleanly, else 1. Members start in a session of their
own, so that a terminal's Ctrl-C reaches the supervisor alone, which stops them in order; on Linux the
kernel sends a member SIGTERM if the supervisor dies (PR_SET_PDEATHSIG), so that none runs on unsupervised.
Each line a member writes is relayed tagged `[worker <index>] `, its output to the supervisor's output and
its errors (its log) to its errors: one terminal stays readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, BinaryIO

from agents import Crashed, RestartPolicy, Service, Supervisor
from engine.errors import ConfigError
from engine.lockfile import holding
from engine.loops import stop_on_signals

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from engine.settings import Processes, Settings

log = logging.getLogger(__name__)

RESTARTS = RestartPolicy(max_restarts=5, within=timedelta(minutes=2), backoff=timedelta(seconds=1),
                         max_backoff=timedelta(seconds=30))
DRAIN = 5.0  # seconds a member's output is still relayed after it exited (a process it started may hold it)
_PR_SET_PDEATHSIG = 1  # prctl(2)


def process_count(processes: Processes) -> int:
    """How many processes the `processes` setting means: "auto" is one per core this process may run on."""
    if processes != "auto":
        return processes
    if hasattr(os, "sched_getaffinity"):  # (the affinity mask: under taskset, fewer than cpu_count)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def member_environment(settings: Settings, index: int) -> dict[str, str]:
    """The settings of member `index` that differ from the supervisor's, as ENGINE_* variables (so the
    member's command line must not give them as options, which come after the environment)."""
    env = {"ENGINE_PROCESSES": "1", "ENGINE_DATA_DIR": str(settings.data_dir / str(index)),
           "ENGINE_WEB_PORT": str(settings.web_port + index if settings.web_port else 0)}
    if settings.group_instance_id not in (None, "auto"):
        env["ENGINE_GROUP_INSTANCE_ID"] = f"{settings.group_instance_id}-{index}"
    return env


class MemberExited(Crashed):
    """A member process exited with another status than 0, or was killed by a signal."""

    def __init__(self, name: str, pid: int, code: int) -> None:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        super().__init__(f"{name} (pid {pid}) {how}")
        self.code = code


class Member:
    """One member: its process started, its output relayed, its exit awaited (`run`, a supervisor's child)."""

    def __init__(self, index: int, command: Sequence[str], env: Mapping[str, str],
                 outputs: tuple[BinaryIO, BinaryIO] | None = None) -> None:
        """`outputs`: where its output and its errors are relayed (default: this process's own)."""
        self.name = f"worker {index}"
        self._command = list(command)
        self._env = dict(env)
        self._outputs = outputs or (sys.stdout.buffer, sys.stderr.buffer)
        self.process: asyncio.subprocess.Process | None = None
        self.exit_code: int | None = None  # of its last run

    async def run(self) -> None:
        """Run the member's process until it exits: with 0 this returns, otherwise it raises MemberExited.
        Cancelled (the supervisor stopping), it sends the process SIGTERM and waits for it to exit."""
        process = self.process = await asyncio.create_subprocess_exec(
            *self._command, env=self._env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, preexec_fn=_die_with(os.getpid()))
        log.info("%s started: pid %d, data dir %s, web port %s", self.name, process.pid,
                 self._env.get("ENGINE_DATA_DIR"), self._env.get("ENGINE_WEB_PORT"))
        finished = asyncio.ensure_future(self._finish(process))
        try:
            self.exit_code = await asyncio.shield(finished)
        except asyncio.CancelledError:
            self.send(signal.SIGTERM)
            self.exit_code = await finished
            log.info("%s (pid %d) stopped with exit code %d", self.name, process.pid, self.exit_code)
            raise
        if self.exit_code != 0:
            raise MemberExited(self.name, process.pid, self.exit_code)
        log.info("%s (pid %d) stopped with exit code 0 (told to stop): not restarted", self.name, process.pid)

    def send(self, sig: signal.Signals) -> None:
        """Send the member's process `sig`, if it runs."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    async def _finish(self, process: asyncio.subprocess.Process) -> int:
        """Relay the process's output until it exits (and its pipes close, for at most DRAIN seconds after);
        its exit code."""
        assert process.stdout is not None  # (both are pipes)
        assert process.stderr is not None
        tag = f"[{self.name}] ".encode()
        relays = [asyncio.ensure_future(relay(stream, out, tag))
                  for stream, out in zip((process.stdout, process.stderr), self._outputs, strict=True)]
        code = await process.wait()
        _, late = await asyncio.wait(relays, timeout=DRAIN)
        for task in late:
            task.cancel()
        return code


async def relay(stream: asyncio.StreamReader, out: BinaryIO, tag: bytes) -> None:
    """Copy `stream` to `out` line by line, each line prefixed with `tag`, until its end. A line cut by the
    end is ended; once `out` cannot be written (a closed pipe), the rest is read and dropped, so that the
    member never blocks on a full pipe."""
    pending = b""
    writable = True
    while chunk := await stream.read(1 << 16):
        *lines, pending = (pending + chunk).split(b"\n")
        if lines and writable:
            writable = _write(out, b"".join(tag + line + b"\n" for line in lines))
    if pending and writable:
        _write(out, tag + pending + b"\n")


def _write(out: BinaryIO, data: bytes) -> bool:
    try:
        out.write(data)
        out.flush()
    except OSError:
        return False
    return True


def _die_with(parent: int) -> Callable[[], None] | None:
    """What a member runs between fork and exec on Linux: the kernel is to send it SIGTERM when the
    supervisor (`parent`) dies, and if that happened already, it sends itself SIGTERM. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return set_parent_death_signal


class MemberProcesses(Service):
    """The supervisor of an app's member processes: restarts those that crash (by its policy), stops them
    all when asked, and says how they ended (`run_until_stopped`)."""

    def __init__(self, members: Sequence[Member], policy: RestartPolicy = RESTARTS) -> None:
        super().__init__("processes")
        self.members = list(members)
        self.supervisor = self.add_child(Supervisor("processes", policy))
        for member in self.members:
            self.supervisor.supervise(member.name, member.run)
        self._stopping = asyncio.Event()

    def request_stop(self) -> None:
        """Stop every member (SIGTERM: each stops cleanly); asked again, kill those still running."""
        if self._stopping.is_set():
            log.warning("asked again to stop: killing the workers still running")
            for member in self.members:
                member.send(signal.SIGKILL)
        self._stopping.set()

    async def run_until_stopped(self) -> int:
        """Run the members until asked to stop, until one is given up, or until every one stopped by itself;
        then stop them all. The exit status: 0 if every member's last exit was clean, else 1."""
        await self.start()
        waiters = [asyncio.ensure_future(self._stopping.wait()), asyncio.ensure_future(self.failed.wait()),
                   asyncio.ensure_future(self.supervisor.wait_children(None))]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            if self.failure is not None:
                log.error("a worker was given up: stopping the others")
            await self.stop()
        failed = [m for m in self.members if m.exit_code != 0]
        for member in failed:
            log.error("%s ended with exit code %s", member.name, member.exit_code)
        log.info("%d of %d worker processes stopped cleanly", len(self.members) - len(failed),
                 len(self.members))
        return 1 if failed or self.failure is not None else 0


async def run_processes(settings: Settings, command: Sequence[str], count: int) -> int:
    """Run `count` members of the app `settings` are of, until SIGTERM or SIGINT; the exit status.
    `command`: a member's `engine worker` command line, without the options `member_environment` gives."""
    if settings.transport_scheme == "memory":
        raise ConfigError(f"{count} worker processes cannot share {settings.broker}: an in-memory broker "
                          "lives inside one process; use a Kafka broker (--broker kafka://host:port)")
    if settings.web_port and settings.web_port + count - 1 > 65535:
        raise ConfigError(f"setting 'web_port' is {settings.web_port}; {count} worker processes take "
                          f"web_port..web_port+{count - 1}: expected at most {65536 - count} (or 0)")
    with holding(settings.app_dir):
        members = [Member(index, command, {**os.environ, **member_environment(settings, index)})
                   for index in range(count)]
        processes = MemberProcesses(members)
        log.info("%d worker processes of %s, data dirs %s/0..%d", count, settings.app_id, settings.data_dir,
                 count - 1)
        with stop_on_signals(processes.request_stop):
            return await processes.run_until_stopped()
