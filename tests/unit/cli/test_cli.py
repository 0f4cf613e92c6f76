"""The engine command: one-line errors that say what to do, and the listing commands."""

import asyncio

import pytest

from cli.main import main

SPARK_EXTRA = "the spark extra: pip install 'engine-streams[spark]'"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_missing_module_is_one_line(capsys):
    code, _, err = run(capsys, "agents", "-A", "no_such_module:app")
    assert code == 1
    assert err.strip() == ("engine: no module named 'no_such_module'; run from the directory that "
                           "contains it or check the -A spelling")


def test_missing_attribute_and_wrong_type(capsys):
    assert run(capsys, "agents", "-A", "examples.wordcount:nope")[2].strip() == (
        "engine: module 'examples.wordcount' has no attribute 'nope'; expected an engine.App")
    assert "is a Table, not an engine.App" in run(capsys, "agents", "-A", "examples.wordcount:counts")[2]


def test_unreachable_broker_says_how_to_start_one(capsys):
    code, _, err = run(capsys, "send", "-A", "examples.wordcount:app", "--broker",
                       "kafka://127.0.0.1:1", "lines", "hello")
    assert code == 1
    assert "no Kafka broker answered at '127.0.0.1:1'" in err
    assert "python -m tests.kafka start" in err
    assert "Traceback" not in err


def test_bad_setting_from_the_command_line(capsys):
    code, _, err = run(capsys, "agents", "-A", "examples.wordcount:app", "--broker", "kafka:/oops")
    assert code == 1
    assert err.startswith("engine: --broker kafka:/oops: expected kafka://host:port")


def test_listings(capsys):
    code, out, _ = run(capsys, "agents", "-A", "examples.wordcount:app")
    assert code == 0
    assert "split" in out
    assert "lines" in out
    code, out, _ = run(capsys, "topics", "-A", "examples.not_viewing:app")
    assert "app-events" in out
    assert "json:AppEvent" in out
    # The topology, pipelines included: the repartition topic of a group_by is known before any worker ran.
    code, out, _ = run(capsys, "topics", "-A", "tests.integration.topology_apps:app")
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:]}
    assert rows["itopology-by-customer-repartition"] == ["repartition", "4"]
    assert rows["itopology-spent-changelog"] == ["changelog", "4"]
    assert rows["itopology-per-customer-closed"] == ["closed", "4"]
    # Registry formats, with their subjects.
    code, out, _ = run(capsys, "topics", "-A", "tests.integration.schema_apps:app")
    sales = next(line for line in out.splitlines() if line.startswith("ischemas-sales "))
    assert "avro:str" in sales
    assert "avro:Sale" in sales
    assert "(key subject ischemas-sales-key, value subject ischemas-sales-value)" in sales
    orders = next(line for line in out.splitlines() if line.startswith("ischemas-orders "))
    assert "protobuf:Order" in orders


def test_send_checks_the_value_and_refuses_an_in_memory_broker(capsys):
    code, _, err = run(capsys, "send", "-A", "examples.not_viewing:app", "--broker", "memory://cli",
                       "app-events", '{"user": "ada", "action": "Close"}', "--key", "ada")
    assert code == 1
    assert "an in-memory broker lives inside one process" in err
    code, _, err = run(capsys, "send", "-A", "examples.not_viewing:app", "--broker", "memory://cli",
                       "app-events", '{"user": "ada"}')
    assert code == 1
    assert err.startswith("engine: value '{\"user\": \"ada\"}' does not fit topic 'app-events'")
    assert "cannot build AppEvent" in err


def test_loglevel_is_checked(capsys):
    assert run(capsys, "agents", "-A", "examples.wordcount:app", "--loglevel", "LOUD")[0] == 2


@pytest.mark.parametrize("package", ["engine", "agents", "engine.tools"])
def test_public_api_is_sorted_and_complete(package):
    import importlib

    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__))  # order: ruff's RUF022 keeps it sorted
    for name in module.__all__:
        assert hasattr(module, name), name
    public = {n for n, v in vars(module).items()
              if not n.startswith("_") and not isinstance(v, type(module))}
    assert public <= set(module.__all__) | {"annotations"}


def test_engine_exports_what_its_readme_examples_use():
    import engine
    from engine.windows import WindowRange

    assert engine.WindowRange is WindowRange  # a windowed table's keys: (key, WindowRange)
    assert "WindowRange" in engine.__all__


def cli_uses_of_engine() -> list[tuple[str, str, str | None]]:
    """(file, module, name) for everything the cli takes from engine: each module it imports (name None),
    each name it imports from one (type-checking imports too), and each attribute it reads of a module it
    imported by name (`export.parse_target` after `from engine import export`: module engine.export)."""
    import ast
    import contextlib
    import importlib
    from pathlib import Path

    uses: list[tuple[str, str, str | None]] = []
    for path in Path(__file__).resolve().parents[3].joinpath("cli").rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = {}  # local name -> engine module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine"):
                uses.append((path.name, node.module, None))
                for alias in node.names:
                    uses.append((path.name, node.module, alias.name))
                    full = f"{node.module}.{alias.name}"
                    with contextlib.suppress(ImportError):  # (not a module: a class, a function)
                        importlib.import_module(full)
                        modules[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("engine"):
                        uses.append((path.name, alias.name, None))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                uses.append((path.name, modules[node.value.id], node.attr))
    return uses


def test_the_cli_imports_only_engines_public_api():
    """cli is a thin shell: it uses what users can use (the engine package, engine.export, engine.tools)."""
    public = {"engine", "engine.export", "engine.tools"}
    found = {}
    for file, module, _ in cli_uses_of_engine():
        found.setdefault(module, set()).add(file)
    assert found, "the cli imports engine"
    assert {m: files for m, files in found.items() if m not in public} == {}


def test_the_cli_uses_only_public_names_and_engine_tools_is_what_it_uses():
    """Every name the cli takes from engine, engine.export and engine.tools is in that module's `__all__`
    (engine.export itself, a package, aside); and engine.tools' `__all__` is exactly what the cli uses:
    the operations API has no names for nothing."""
    import importlib

    used: dict[str, set[str]] = {}
    for _, module, name in cli_uses_of_engine():
        if name is not None and f"{module}.{name}" != "engine.export":
            used.setdefault(module, set()).add(name)
    for module, names in used.items():
        public = set(importlib.import_module(module).__all__)
        assert names - public == set(), f"the cli uses names {module}.__all__ does not have"
    assert used["engine.tools"] == set(importlib.import_module("engine.tools").__all__)


async def test_tables_and_table_get_read_the_local_rocksdb_stores(capsys, tmp_path, monkeypatch):
    from engine import testing
    from examples import wordcount

    url = testing.memory_url()
    async with testing.running(wordcount.app, broker=url, data_dir=str(tmp_path)):
        for line in ["red green", "red"]:
            await wordcount.lines.send(value=line)
        await testing.eventually(lambda: dict(wordcount.counts.items()) == {"red": 2, "green": 1})
    code, out, _ = await asyncio.to_thread(
        run, capsys, "tables", "-A", "examples.wordcount:app", "--broker", url,
                       "--data-dir", str(tmp_path))
    assert code == 0
    assert "word-counts" in out
    assert "wordcount-word-counts-changelog" in out
    assert sum(int(line.split(":")[1].split()[0]) for line in out.splitlines()
               if line.strip().startswith("partition")) == 2
    assert run(capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "red", "--offline",
               "--data-dir", str(tmp_path))[1].strip() == "2"
    code, out, _ = run(capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "blue",
                       "--offline", "--data-dir", str(tmp_path))
    assert code == 1
    assert "no such key" in out
    code, _, err = run(capsys, "table", "get", "-A", "examples.wordcount:app", "nope", "x",
                       "--data-dir", str(tmp_path))
    assert err.strip() == "engine: app 'wordcount' has no table 'nope' (tables: word-counts)"
    code, _, err = run(capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "x",
                       "--offline", "--data-dir", str(tmp_path / "elsewhere"))
    assert "pass the worker's --data-dir" in err


def test_export_errors_name_what_is_wrong(capsys, tmp_path):
    code, _, err = run(capsys, "export", "-A", "examples.wordcount:app", "nope", "--to", str(tmp_path))
    assert code == 1
    assert err.strip() == "engine: app 'wordcount' has no table 'nope' (tables: word-counts)"
    code, _, err = run(capsys, "export", "-A", "examples.wordcount:app", "word-counts", "--to",
                       str(tmp_path / "out"), "--data-dir", str(tmp_path))
    assert code == 1
    assert "no stores of table 'word-counts'" in err
    assert "export from the changelog instead" in err
    existing = tmp_path / "a-file.txt"
    existing.write_text("not an export")
    code, _, err = run(capsys, "export", "-A", "examples.wordcount:app", "word-counts", "--to",
                       str(existing), "--from-changelog", "--broker", "memory://export-file")
    assert code == 1
    assert err.strip() == f"engine: cannot export to {existing}: it is a file; an export is a directory " \
        "(give a new path, or an earlier export's directory to replace it)"
    code, _, err = run(capsys, "export", "-A", "examples.wordcount:app", "word-counts", "--to",
                       str(tmp_path / "out"), "--live")
    assert code == 2
    assert err.strip() == ("engine: --live exports into a lake table (delta:PATH or "
                           "iceberg:NAMESPACE.TABLE), from the running workers (not --from-changelog)")
    code, _, err = run(capsys, "export", "-A", "examples.wordcount:app", "word-counts", "--to",
                       f"delta:{tmp_path / 'lake'}", "--live", "--url", "http://127.0.0.1:9")
    assert code == 1
    assert err.strip() == ("engine: no worker of 'wordcount' answered at http://127.0.0.1:9 (a worker logs "
                           "its address as 'web server at http://...'); pass --url")


def test_export_progress_bar_draws_on_a_terminal():
    import io

    from cli.commands.export import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = ProgressBar("exporting t", screen, width=10)
    bar(50, 100)
    bar(100, 100)
    bar.finish()
    assert screen.getvalue().endswith("\rexporting t [##########] 100% 100/100 rows\n")
    assert "[#####.....]  50% 50/100 rows" in screen.getvalue()


async def test_tables_and_table_get_on_a_windowed_table(capsys, tmp_path):
    pytest.importorskip("pyarrow", reason=SPARK_EXTRA)  # (it exports)
    import orjson

    from engine import export, testing
    from examples import retail

    url = testing.memory_url()
    start = 1_767_225_600  # a 10-minute window boundary
    async with testing.running(retail.app, broker=url, data_dir=str(tmp_path)) as worker:
        await testing.eventually(lambda: len(retail.app.tables["units-sold"].active) == 4)
        for quantity, at in [(2, start + 5), (3, start + 60), (4, start + 700)]:
            await retail.sales.send(key="sku-1", value=retail.Sale("sku-1", quantity, 1.0, at))
        await testing.eventually(lambda: len(retail.units_sold["sku-1"].items()) == 2)
        await worker.checkpoint()  # an export reads the stores: the last checkpoint's state
        manifest = await export.export_table(retail.units_sold, tmp_path / "export")  # windowed: unwrapped
        assert manifest.rows == 2
    code, out, _ = await asyncio.to_thread(
        run, capsys, "tables", "-A", "examples.retail:app", "--broker", url,
                       "--data-dir", str(tmp_path))
    assert code == 0
    assert "units-sold               windowed" in out
    assert "1 keys in 2 windows" in out
    code, out, _ = run(capsys, "table", "get", "-A", "examples.retail:app", "units-sold", "sku-1",
                       "--offline", "--data-dir", str(tmp_path))
    assert code == 0
    assert orjson.loads(out) == [
        {"window_start": start, "window_end": start + 600, "value": 5},
        {"window_start": start + 600, "window_end": start + 1200, "value": 4},
    ]


def test_a_data_dir_that_is_a_file_is_a_one_line_error_before_anything_connects(capsys, tmp_path):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("")
    code, _, err = run(capsys, "worker", "-A", "examples.wordcount:app", "--broker", "memory://dd",
                       "--data-dir", str(not_a_dir))
    assert code == 1
    assert err.strip() == (f"engine: setting 'data_dir' is {str(not_a_dir)!r}, which is a file; expected "
                           "a directory for the worker's stores (it is created if missing)")


def test_worker_processes_are_checked_in_one_line_before_any_starts(capsys, tmp_path):
    code, _, err = run(capsys, "worker", "-A", "examples.wordcount:app", "--broker", "memory://p",
                       "--data-dir", str(tmp_path), "--processes", "0")
    assert (code, err.strip()) == (1, "engine: --processes 0: expected a number of at least 1, "
                                      "or 'auto' (one per core)")
    code, _, err = run(capsys, "worker", "-A", "examples.wordcount:app", "--broker", "memory://p",
                       "--data-dir", str(tmp_path), "--processes", "2")
    assert (code, err.strip()) == (1, "engine: 2 worker processes cannot share memory://p: an in-memory "
                                      "broker lives inside one process; use a Kafka broker (--broker "
                                      "kafka://host:port)")


async def test_tables_table_get_and_export_on_global_and_source_tables(capsys, tmp_path):
    pytest.importorskip("pyarrow", reason=SPARK_EXTRA)  # (it exports)
    import orjson

    from engine import export, testing
    from tests.unit.cli import kinds_app

    url = testing.memory_url()
    async with testing.running(kinds_app.app, broker=url, data_dir=str(tmp_path)) as worker:
        for code, name in [("r1", "north"), ("r2", "south")]:
            await kinds_app.region_updates.send(key=code, value=name)
        feed = kinds_app.app.topics["price-feed"]
        for sku, price in [("a", 1.5), ("b", 2.0), ("a", 1.75)]:
            await feed.send(key=sku, value=price)  # others write a source table's topic
        await testing.eventually(lambda: dict(kinds_app.regions.items()) == {"r1": "north", "r2": "south"})
        await testing.eventually(lambda: dict(kinds_app.prices.items()) == {"a": 1.75, "b": 2.0})
        quote_feed = kinds_app.app.topics["quote-feed"]
        for at, price in [(1_800_000_010, 2.0), (1_800_000_000, 1.0), (1_800_000_020, 3.0)]:  # (out of order)
            await quote_feed.send(key="q", value=price, timestamp_ms=at * 1000)
        await testing.eventually(lambda: kinds_app.quotes.get("q") == 3.0
                                 and kinds_app.quotes.as_of("q", 1_800_000_005) == 1.0)
        await worker.checkpoint()
        for table in (kinds_app.regions, kinds_app.prices):
            manifest = await export.export_table(table, tmp_path / "export" / table.name)
            assert manifest.rows == 2
    code, out, _ = await asyncio.to_thread(
        run, capsys, "tables", "-A", "tests.unit.cli.kinds_app:app", "--broker", url,
                       "--data-dir", str(tmp_path))
    assert code == 0
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if not line.startswith(" ")}
    assert lines["regions"] == ["global", "kinds-regions-changelog", "4", "2"]
    assert lines["prices"] == ["source", "price-feed", "4", "2"]
    assert lines["quotes"] == ["versioned", "quote-feed", "4", "1"]
    assert "1 keys in 3 versions" in out
    for table, key, value in [("regions", "r2", "south"), ("prices", "a", 1.75)]:
        code, out, _ = run(capsys, "table", "get", "-A", "tests.unit.cli.kinds_app:app", table, key,
                           "--offline", "--data-dir", str(tmp_path))
        assert code == 0
        assert orjson.loads(out) == value
    for asked, value in [((), 3.0), (("--as-of", "1800000010.5"), 2.0),
                         (("--as-of", "2027-01-15T08:00:09"), 1.0),  # (without a zone: UTC)
                         (("--from", "1800000005", "--to", "1800000010"), [
                             {"value": 1.0, "valid_from": 1800000000, "valid_to": 1800000010},
                             {"value": 2.0, "valid_from": 1800000010, "valid_to": 1800000020}])]:
        code, out, _ = run(capsys, "table", "get", "-A", "tests.unit.cli.kinds_app:app", "quotes", "q",
                           "--offline", "--data-dir", str(tmp_path), *asked)
        assert (code, orjson.loads(out)) == (0, value), asked
    code, _, err = run(capsys, "table", "get", "-A", "tests.unit.cli.kinds_app:app", "quotes", "q",
                       "--offline", "--data-dir", str(tmp_path), "--as-of", "inf")
    assert (code, err.strip()) == (1, "engine: --as-of must be a time within ±1e+15 s of the epoch, not "
                                      "'inf'")


def test_status_refuses_an_in_memory_broker(capsys):
    code, _, err = run(capsys, "status", "-A", "examples.wordcount:app", "--broker", "memory://cli")
    assert code == 1
    assert err.startswith("engine: engine status cannot use memory://cli: an in-memory broker lives inside")


async def test_table_get_asks_a_running_worker_and_says_when_none_answers(capsys, tmp_path):
    from engine import testing
    from examples import wordcount

    url = testing.memory_url()
    async with testing.running(wordcount.app, broker=url, data_dir=str(tmp_path), web_enabled=True,
                               web_port=0) as worker:
        for line in ["red green", "red"]:
            await wordcount.lines.send(value=line)
        await testing.eventually(lambda: dict(wordcount.counts.items()) == {"red": 2, "green": 1})
        at = f"http://{worker.placement.endpoint}"
        # No checkpoint needed: the worker answers with what it holds now, unlike the stores on disk.
        code, out, _ = await asyncio.to_thread(
            run, capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "red", "--url", at)
        assert (code, out.strip()) == (0, "2")
        code, _, err = await asyncio.to_thread(
            run, capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "blue", "--url", at)
        assert code == 1
        assert "no such key" in err
    code, _, err = await asyncio.to_thread(
        run, capsys, "table", "get", "-A", "examples.wordcount:app", "word-counts", "red", "--url",
        "http://127.0.0.1:9")
    assert code == 1
    assert "no worker of 'wordcount' answered at http://127.0.0.1:9" in err
    assert "--offline" in err


def test_a_reader_that_stops_early_is_no_error():
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "cli.main", "topics", "-A", "examples.wordcount:app",
                                "--broker", "memory://pipe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # as `engine topics | head -0` does
    err = process.stderr.read().decode()
    assert process.wait(60) == 0
    assert "BrokenPipeError" not in err
    assert "Traceback" not in err


async def test_export_to_delta_then_only_the_changes_and_its_status(capsys, tmp_path):
    DeltaTable = pytest.importorskip("deltalake", reason=SPARK_EXTRA).DeltaTable

    from engine import testing
    from examples import wordcount

    def delta_rows(path) -> dict[str, int]:
        return {row["key"]: row["value"] for row in DeltaTable(str(path)).to_pyarrow_table().to_pylist()}

    url, lake = testing.memory_url(), tmp_path / "lake"
    common = ["-A", "examples.wordcount:app", "--broker", url, "--data-dir", str(tmp_path / "data")]

    async def export_cli(*args: str) -> str:
        code, out, _ = await asyncio.to_thread(run, capsys, "export", *common, *args)
        assert code == 0
        return out

    async with testing.running(wordcount.app, broker=url, data_dir=str(tmp_path / "data")) as worker:
        await testing.eventually(lambda: len(wordcount.counts.active) == 4)
        await wordcount.lines.send(value="the fox and the dog")
        await testing.eventually(lambda: wordcount.counts["the"] == 2)
        await worker.checkpoint()
        out = await export_cli("word-counts", "--to", f"delta:{lake}")
        assert out.startswith(f"exported 4 rows of word-counts from store to delta:{lake}, version 0 (full;")
        assert delta_rows(lake) == {"the": 2, "fox": 1, "and": 1, "dog": 1}
        await wordcount.lines.send(value="the cat")
        await testing.eventually(lambda: wordcount.counts["cat"] == 1)
        await worker.checkpoint()
        out = await export_cli("word-counts", "--to", f"delta:{lake}")
        assert "exported 2 changed rows and 0 deletes of word-counts" in out
        assert "version 1 (incremental;" in out
        assert delta_rows(lake) == {"the": 3, "fox": 1, "and": 1, "dog": 1, "cat": 1}
        await export_cli("--all", "--to", f"delta:{tmp_path / 'all'}")
        assert delta_rows(tmp_path / "all" / "word-counts") == delta_rows(lake)
        out = await export_cli("word-counts", "--to", f"delta:{lake}")  # nothing changed since: no version
        assert out.strip() == f"nothing to export to delta:{lake}: it holds word-counts as it is (version 1)"
        offsets = {n: part.store.changelog_offset() for n, part in wordcount.counts.active.items()}
    code, out, _ = run(capsys, "export", "-A", "examples.wordcount:app", "--status", f"delta:{lake}")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"delta:{lake}: version 1, incremental export from store at ")
    assert lines[1] == "table word-counts of app wordcount (changelog wordcount-word-counts-changelog), " \
        "4 of 4 partitions exported"
    assert lines[2:] == [f"  partition {n}: changelog offset {offsets[n]}" for n in range(4)]


def test_export_arguments_that_do_not_go_together(capsys, tmp_path):
    pytest.importorskip("pyarrow", reason=SPARK_EXTRA)  # (it exports)
    app = ["-A", "examples.wordcount:app"]
    assert run(capsys, "export", *app, "word-counts")[2].strip() == \
        "engine: export needs --to TARGET (a directory, delta:PATH or iceberg:NAMESPACE.TABLE), or " \
        "--status TARGET"
    assert run(capsys, "export", *app, "word-counts", "--all", "--to", str(tmp_path))[2].strip() == \
        "engine: export needs a table name, or --all (not both)"
    assert "read a lake table with Spark's Delta or Iceberg reader" in run(
        capsys, "export", *app, "word-counts", "--to", f"delta:{tmp_path}", "--spark")[2]
    code, out, _ = run(capsys, "export", *app, "--status", f"delta:{tmp_path / 'none'}")
    assert code == 0
    assert out.strip() == f"delta:{tmp_path / 'none'}: no version written by an engine export"
    assert "unknown export target 'hudi'" in run(capsys, "export", *app, "word-counts", "--to", "hudi:t")[2]
    assert "give iceberg:NAMESPACE.TABLE" in run(capsys, "export", *app, "word-counts", "--to", "iceberg:")[2]


def subcommand_helps() -> dict[str, str]:
    import argparse

    from cli.main import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: command.format_help() for name, command in sub.choices.items()}


def test_every_subcommand_has_a_description_and_ends_with_an_example():
    helps = subcommand_helps()
    assert set(helps) >= {"worker", "send", "topics", "agents", "tables", "table", "export", "status",
                          "reset"}
    for name, text in helps.items():
        description = text.split("\n\n")[1]  # (after the usage)
        assert not description.lstrip().startswith(("positional arguments", "options")), \
            f"{name}: no description line"
        lines = text.rstrip().splitlines()
        assert lines[-2].strip().startswith("example"), f"{name}: its help does not end with an example"
        assert lines[-1].strip().startswith(f"engine {name} "), f"{name}: {lines[-1]!r}"
        assert " -A " in lines[-1], f"{name}: the example names the app"


def test_the_subcommands_help_says_what_their_arguments_are():
    helps = subcommand_helps()
    assert "{get}" not in helps["table"]
    assert "usage: engine table" in helps["table"]
    assert " get TABLE KEY" in helps["table"]
    assert "Iceberg" in helps["export"].split("\n\n")[1]
    arguments = helps["send"].split("positional arguments:", 1)[1]  # (past the usage lines)
    for argument in ("TOPIC", "--key KEY"):
        [line] = [ln for ln in arguments.splitlines() if ln.strip().startswith(argument)]
        assert len(line.strip()) > len(argument) + 5, f"send's {argument} has no help"
    assert "module:app" in helps["worker"] or "-A module" in helps["worker"]
    assert "(default attribute: app)" in " ".join(helps["worker"].split())
