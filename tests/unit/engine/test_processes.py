"""The supervisor of `engine worker --processes N` (engine.processes), over small member processes of its own
(a Python one-liner that behaves as a worker does on SIGTERM): each member's settings, its output tagged,
SIGTERM passed to every member, a crashed one restarted with its own settings, one that keeps crashing given
up with the others stopped, and the exit status. On Kafka: tests/integration/test_processes_on_kafka.py."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agents import RestartPolicy
from engine.errors import ConfigError
from engine.processes import Member, MemberProcesses, member_environment, process_count, relay, run_processes
from engine.settings_load import load_settings

if TYPE_CHECKING:
    from pathlib import Path

FAST = RestartPolicy(max_restarts=2, within=timedelta(minutes=1), backoff=timedelta(milliseconds=10),
                     max_backoff=timedelta(milliseconds=40))

# A member: says it is ready once it stops on SIGTERM (as a worker does: exit 0, leaving a file "stopped" in
# its data dir), then waits. FAKE_CRASH=N: exits with N instead, on each of its first FAKE_CRASHES starts
# (counted in a file of its data dir, which a restarted member must find again); FAKE_EXIT: exits with 0 at
# once, by itself; FAKE_STUBBORN: goes on after SIGTERM.
MEMBER = """
import os, pathlib, signal, sys, time
data = pathlib.Path(os.environ["ENGINE_DATA_DIR"]); data.mkdir(parents=True, exist_ok=True)
def stop(signum, frame):
    (data / "stopped").touch()
    print("stopping on SIGTERM", file=sys.stderr, flush=True)
    if not os.environ.get("FAKE_STUBBORN"):
        sys.exit(0)
signal.signal(signal.SIGTERM, stop)
starts = data / "starts"; started = int(starts.read_text()) + 1 if starts.exists() else 1
starts.write_text(str(started))
print(f"start {started} port {os.environ['ENGINE_WEB_PORT']}", flush=True)
if started <= int(os.environ.get("FAKE_CRASHES", "0")):
    print("crashing", file=sys.stderr, flush=True); sys.exit(int(os.environ["FAKE_CRASH"]))
if os.environ.get("FAKE_EXIT"):
    sys.exit(0)
print("ready", file=sys.stderr, flush=True)
while True:
    time.sleep(1)
"""


def settings(tmp_path: Path, **given: object):
    return load_settings("app", {"data_dir": tmp_path / "data", "broker": "kafka://127.0.0.1:1", **given},
                         environ={})


def members(tmp_path: Path, count: int, env: dict[str, str] | None = None
            ) -> tuple[list[Member], io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    s = settings(tmp_path)
    return [Member(i, [sys.executable, "-c", MEMBER],
                   {**os.environ, **member_environment(s, i), **(env or {})}, outputs=(out, err))
            for i in range(count)], out, err


async def until(condition, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_each_member_has_its_data_dir_its_web_port_and_its_static_name(tmp_path):
    s = settings(tmp_path, web_port=7000, group_instance_id="node-a")
    assert [member_environment(s, i) for i in (0, 1)] == [
        {"ENGINE_PROCESSES": "1", "ENGINE_DATA_DIR": str(tmp_path / "data" / "0"), "ENGINE_WEB_PORT": "7000",
         "ENGINE_GROUP_INSTANCE_ID": "node-a-0"},
        {"ENGINE_PROCESSES": "1", "ENGINE_DATA_DIR": str(tmp_path / "data" / "1"), "ENGINE_WEB_PORT": "7001",
         "ENGINE_GROUP_INSTANCE_ID": "node-a-1"},
    ]
    # Any free port stays any free port; "auto" (the worker id kept in each member's data dir) stays "auto".
    assert member_environment(settings(tmp_path, web_port=0, group_instance_id="auto"), 1) == {
        "ENGINE_PROCESSES": "1", "ENGINE_DATA_DIR": str(tmp_path / "data" / "1"), "ENGINE_WEB_PORT": "0"}


def test_processes_is_a_setting_from_app_arguments_environment_and_options(tmp_path):
    assert settings(tmp_path).processes == 1
    assert load_settings("app", {"processes": 3}, environ={}).processes == 3
    assert load_settings("app", {}, environ={"ENGINE_PROCESSES": "auto"}).processes == "auto"
    assert load_settings("app", {}, {"processes": "2"}, environ={"ENGINE_PROCESSES": "auto"}).processes == 2
    assert process_count("auto") == len(os.sched_getaffinity(0))
    assert process_count(2) == 2
    with pytest.raises(ConfigError, match=r"ENGINE_PROCESSES=0: expected a number of at least 1"):
        load_settings("app", {}, environ={"ENGINE_PROCESSES": "0"})
    with pytest.raises(ConfigError, match=r"--processes many: expected an integer or 'auto'"):
        load_settings("app", {}, {"processes": "many"}, environ={})


async def test_an_in_memory_broker_and_ports_past_the_last_are_refused_for_several_processes(tmp_path):
    with pytest.raises(ConfigError, match="an in-memory broker lives inside one process"):
        await run_processes(settings(tmp_path, broker="memory://"), ["true"], 2)
    with pytest.raises(ConfigError, match=r"3 worker processes take web_port..web_port\+2: expected at most "
                                          r"65533 \(or 0\)"):
        await run_processes(settings(tmp_path, web_port=65534), ["true"], 3)


async def test_members_output_is_tagged_and_a_stop_reaches_every_member_which_stops_cleanly(tmp_path):
    group, out, err = members(tmp_path, 2)
    processes = MemberProcesses(group, FAST)
    running = asyncio.ensure_future(processes.run_until_stopped())
    await until(lambda: err.getvalue().count(b"ready\n") == 2)
    processes.request_stop()
    assert await running == 0
    lines = set(out.getvalue().decode().splitlines()) | set(err.getvalue().decode().splitlines())
    assert {"[worker 0] start 1 port 6066", "[worker 1] start 1 port 6067", "[worker 0] ready",
            "[worker 1] ready", "[worker 0] stopping on SIGTERM", "[worker 1] stopping on SIGTERM"} <= lines
    assert [m.exit_code for m in group] == [0, 0]


async def test_a_crashed_member_is_restarted_with_its_own_data_dir_and_a_line_naming_it(tmp_path, caplog):
    group, out, err = members(tmp_path, 1, {"FAKE_CRASH": "3", "FAKE_CRASHES": "1"})
    processes = MemberProcesses(group, FAST)
    running = asyncio.ensure_future(processes.run_until_stopped())
    await until(lambda: b"ready" in err.getvalue())
    processes.request_stop()
    assert await running == 0
    assert out.getvalue().decode().splitlines() == ["[worker 0] start 1 port 6066",
                                                    "[worker 0] start 2 port 6066"]
    [line] = [r.getMessage() for r in caplog.records if "crashed" in r.getMessage()]
    assert re.fullmatch(r"processes: worker 0 crashed \(MemberExited: worker 0 \(pid \d+\) exited with code "
                        r"3\); restart 1 of at most 2 within 60s, in 0.01s", line)
    assert not any(r.exc_info for r in caplog.records), "a member's crash is one line, no traceback"


async def test_a_member_killed_by_a_signal_is_restarted(tmp_path, caplog):
    group, _, err = members(tmp_path, 1)
    processes = MemberProcesses(group, FAST)
    running = asyncio.ensure_future(processes.run_until_stopped())
    await until(lambda: b"ready" in err.getvalue())
    killed = group[0].process
    assert killed is not None
    os.kill(killed.pid, signal.SIGKILL)
    await until(lambda: err.getvalue().count(b"ready") == 2)
    processes.request_stop()
    assert await running == 0
    assert f"worker 0 (pid {killed.pid}) was killed by SIGKILL" in caplog.text


async def test_a_member_that_keeps_crashing_is_given_up_and_the_others_are_stopped(tmp_path, caplog):
    group, out, err = members(tmp_path, 2)
    group[1]._env.update(FAKE_CRASH="5", FAKE_CRASHES="100")  # (only member 1 crashes)
    processes = MemberProcesses(group, FAST)
    assert await asyncio.wait_for(processes.run_until_stopped(), 60) == 1
    assert out.getvalue().decode().count("[worker 1] start") == 3  # the first start and 2 restarts
    assert "[worker 0] stopping on SIGTERM" in err.getvalue().decode()
    assert ("actor 'worker 1' crashed more than 2 times within 60s; last error: MemberExited: worker 1"
            in caplog.text)
    assert [m.exit_code for m in group] == [0, 5]


async def test_a_member_that_stops_by_itself_is_not_restarted_and_the_supervisor_ends_with_the_last(tmp_path):
    group, out, _ = members(tmp_path, 2, {"FAKE_EXIT": "1"})
    assert await asyncio.wait_for(MemberProcesses(group, FAST).run_until_stopped(), 30) == 0
    assert sorted(out.getvalue().decode().splitlines()) == ["[worker 0] start 1 port 6066",
                                                            "[worker 1] start 1 port 6067"]


async def test_the_relay_tags_each_line_across_reads_and_ends_a_last_line_cut_short():
    stream = asyncio.StreamReader()
    for chunk in (b"one\ntw", b"o\n", b"\nthree"):
        stream.feed_data(chunk)
    stream.feed_eof()
    out = io.BytesIO()
    await relay(stream, out, b"[w] ")
    assert out.getvalue() == b"[w] one\n[w] two\n[w] \n[w] three\n"


async def test_the_relay_drains_the_member_when_its_output_is_closed():
    stream = asyncio.StreamReader()
    stream.feed_data(b"a\nb\n")
    stream.feed_data(b"c\n")
    stream.feed_eof()
    reader, writer = os.pipe()
    os.close(reader)  # (the supervisor's output piped to a reader that went away: `| head`)
    with os.fdopen(writer, "wb", buffering=0) as closed:
        await relay(stream, closed, b"")  # no error, and the member's output read to its end
    assert stream.at_eof()


async def test_asked_to_stop_again_the_supervisor_kills_a_member_that_goes_on(tmp_path):
    group, _, err = members(tmp_path, 1, {"FAKE_STUBBORN": "1"})
    processes = MemberProcesses(group, FAST)
    running = asyncio.ensure_future(processes.run_until_stopped())
    await until(lambda: b"ready" in err.getvalue())
    processes.request_stop()
    await until(lambda: b"stopping on SIGTERM" in err.getvalue())
    processes.request_stop()
    assert await asyncio.wait_for(running, 30) == 1
    assert group[0].exit_code == -signal.SIGKILL


async def test_a_member_is_sent_sigterm_when_its_supervisor_dies(tmp_path):
    """(Linux: PR_SET_PDEATHSIG.) A supervisor SIGKILLed leaves no member running unsupervised."""
    [member], _, _ = members(tmp_path, 1)
    script = ("import asyncio, pickle, sys; from engine.processes import Member; "
              "asyncio.run(Member(0, *pickle.loads(sys.stdin.buffer.read())).run())")
    import pickle

    supervisor = await asyncio.create_subprocess_exec(sys.executable, "-c", script,
                                                      stdin=asyncio.subprocess.PIPE)
    assert supervisor.stdin is not None
    supervisor.stdin.write(pickle.dumps((member._command, member._env)))
    supervisor.stdin.close()
    data = tmp_path / "data" / "0"
    await until(lambda: (data / "starts").exists())
    supervisor.kill()
    await supervisor.wait()
    await until(lambda: (data / "stopped").exists())
