"""What the app's own code does with its topics and tables, read from the bytecode of its agents and timers
without running them: the topics it sends to (`topic.send(...)`, `agent.send(...)`, `agent.ask(...)`), the
tables it reads or writes by key, and the sends it makes on something the scan cannot name.

Why: a send from an agent's body is known only at run time, yet two decisions must be made before anything
runs. A reset must tell an input topic (written by others: reprocessed from the start) from an intermediate
one (written by the app and read by it again: its records are made anew, so it goes to its end); and a table
engine creates must get the partition count of the topics whose events write it. The declaration run
(engine.topology.declaration) stops at an agent's first pull, before its body; this scan reads the body.

What it recognises is syntax: a name (a module global, or a variable the function closes over) or a chain of
attributes from one (`shop.topics.orders`), whose object is a Topic, an Agent or a table, followed by a use.
Functions the code names are read too (the app's own, not those of engine, the standard library or installed
packages). A `send` or `ask` on anything else (a local variable, a parameter, `self.out`, what a call
returned) cannot be named: it is reported as unresolved, and whoever needs to know (the reset) asks rather
than guesses. Attributes are read with `inspect.getattr_static`: the scan never runs a property.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.agent import Agent
from engine.tables.base import BaseTable
from engine.topics import Topic

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

SENDS = frozenset({"send", "ask"})  # methods of a Topic or an Agent that write a topic
# Uses of a table that do not look a key up in the event's partition: its local partitions as a whole, a
# query (asked of the key's owner), its topics.
ANY_PARTITION = frozenset({"items", "keys", "values", "query", "changes", "changelog", "closed", "name",
                           "checkpoint", "writers", "partition_count", "is_global", "window", "windowed",
                           "changelog_topic", "key_layout", "active", "late"})
_TRANSPARENT = frozenset({"CACHE", "EXTENDED_ARG", "NOP"})
_UNRESOLVED = object()  # a value the scan cannot name
_NOT_SCANNED = ("engine", "agents")  # packages whose functions an app's code calls but never writes through
_INSTALLED = {Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
              if (p := sysconfig.get_paths().get(key))}


@dataclass
class CodeUses:
    """What one agent's or timer's code does, and where."""

    sends: dict[str, list[str]] = field(default_factory=dict)  # topic -> where (`words.send` at file:line)
    tables: dict[str, list[str]] = field(default_factory=dict)  # non-global table -> where, used by key
    unresolved: list[str] = field(default_factory=list)  # sends on what the scan cannot name, with where


def scan(fun: Callable[..., Any]) -> CodeUses:
    """Read `fun` (an agent's or a timer's function) and every function of the app that it names."""
    uses = CodeUses()
    _Scan(uses).function(fun)
    return uses


class _Scan:
    def __init__(self, uses: CodeUses) -> None:
        self.uses = uses
        self.seen: set[int] = set()

    def function(self, fun: Any) -> None:
        fun = inspect.unwrap(getattr(fun, "__func__", fun))
        code = getattr(fun, "__code__", None)
        if not isinstance(code, types.CodeType) or id(code) in self.seen:
            return
        self.seen.add(id(code))
        cells = dict(zip(code.co_freevars, fun.__closure__ or (), strict=False))
        names: dict[str, Any] = {**vars(builtins), **fun.__globals__}
        for name, cell in cells.items():
            try:
                names[name] = cell.cell_contents
            except ValueError:  # a cell not filled yet
                names[name] = _UNRESOLVED
        for nested in _codes(code):
            self.code(nested, names, code.co_freevars)

    def code(self, code: types.CodeType, names: dict[str, Any], closed_over: tuple[str, ...]) -> None:
        chain: list[str] = []  # the names of the load chain on top of the stack, from its root
        value: Any = None  # what that chain names (_UNRESOLVED when it cannot), None: no chain
        previous: dis.Instruction | None = None
        before: dis.Instruction | None = None  # the instruction before the chain's root
        for ins in dis.get_instructions(code):
            op = ins.opname
            if op in _TRANSPARENT:
                continue
            if value is not None and op not in ("LOAD_ATTR", "LOAD_METHOD"):
                self._used(value, ins, before, code)
            if op.startswith("LOAD_") and op not in ("LOAD_ATTR", "LOAD_METHOD"):
                before = previous
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                chain, value = [ins.argval], names.get(ins.argval, _UNRESOLVED)
            elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                known = ins.argval in closed_over and code.co_name != "<module>"
                chain, value = [ins.argval], names.get(ins.argval, _UNRESOLVED) if known else _UNRESOLVED
            elif op.startswith("LOAD_FAST"):
                chain, value = [str(ins.argval)], _UNRESOLVED
            elif op in ("LOAD_ATTR", "LOAD_METHOD"):
                attribute = str(ins.argval)
                if attribute in SENDS:
                    self._send(value, chain or ["(a value computed there)"], attribute, code, ins)
                elif value is not None and value is not _UNRESOLVED:
                    self._attribute_of(value, attribute, code, ins)
                chain = [*chain, attribute] if chain else []
                value = _attribute(value, attribute) if chain else None
            else:
                chain, value = [], None
            previous = ins

    def _send(self, receiver: Any, chain: list[str], method: str, code: types.CodeType,
              ins: dis.Instruction) -> None:
        where = f"`{'.'.join(chain)}.{method}` {_where(code, ins)}"
        if isinstance(receiver, Topic):
            self.uses.sends.setdefault(receiver.name, []).append(where)
        elif isinstance(receiver, Agent):
            self.uses.sends.setdefault(receiver.channel.name, []).append(where)
        elif receiver is None or receiver is _UNRESOLVED:
            self.uses.unresolved.append(where)
        # (anything else named there, a client of another library, is not a topic)

    def _attribute_of(self, value: Any, attribute: str, code: types.CodeType, ins: dis.Instruction) -> None:
        """`value.attribute`, where value is named: a table used by key unless the attribute is a use of
        every partition, or leads to the same table (a windowed view's `.table`)."""
        table = _table(value)
        if table is None or attribute in ANY_PARTITION:
            return
        if _table(_attribute(value, attribute)) is None:
            self.uses.tables.setdefault(table.name, []).append(_where(code, ins))

    def _used(self, value: Any, ins: dis.Instruction, before: dis.Instruction | None,
              code: types.CodeType) -> None:
        """The chain ended (at `ins`; `before`: what came before its root): what it named is used as a value
        (subscripted, passed, returned...)."""
        if value is _UNRESOLVED:
            return
        table = _table(value)
        if table is not None:
            counted = before is not None and ins.opname in ("PRECALL", "CALL") and _is_len(before)
            if ins.opname != "GET_ITER" and not counted:
                self.uses.tables.setdefault(table.name, []).append(_where(code, ins))
        elif _is_app_function(value):
            self.function(value)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and the code nested in it (comprehensions, lambdas, inner functions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _attribute(value: Any, attribute: str) -> Any:
    if value is None or value is _UNRESOLVED:
        return _UNRESOLVED
    try:
        found = inspect.getattr_static(value, attribute)
    except AttributeError:
        return _UNRESOLVED
    if isinstance(found, (property, types.MemberDescriptorType, types.GetSetDescriptorType)):
        return _UNRESOLVED  # computed when read: not read here
    if isinstance(found, (staticmethod, classmethod)):
        return found.__func__
    return found


def _table(value: Any) -> BaseTable | None:
    """The non-global table `value` is, or is a view of (a windowed table's `.table`)."""
    if not isinstance(value, BaseTable):
        value = _attribute(value, "table")
    return value if isinstance(value, BaseTable) and not value.is_global else None


def _is_len(before: dis.Instruction) -> bool:
    """`len(table)`: the instruction before the table's load named the builtin `len`."""
    return before.opname == "LOAD_GLOBAL" and before.argval == "len"


def _is_app_function(value: Any) -> bool:
    """A function of the app's own code: not engine's, the standard library's or an installed package's."""
    fun = getattr(value, "__func__", value)
    if not isinstance(fun, types.FunctionType):
        return False
    module = (fun.__module__ or "").split(".")[0]
    if module in _NOT_SCANNED or module in sys.stdlib_module_names:
        return False
    try:
        path = Path(fun.__code__.co_filename).resolve()
    except OSError:
        return False
    return not any(path.is_relative_to(folder) for folder in _INSTALLED)


def _where(code: types.CodeType, ins: dis.Instruction) -> str:
    line = ins.positions.lineno if ins.positions is not None else None
    return f"({Path(code.co_filename).name}:{line})" if line else f"(in {code.co_name})"
