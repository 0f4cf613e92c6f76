"""Stored table entries to Arrow columns: the schema a table's declared types imply, and the decoding of raw
store pairs into record batches, a chunk at a time.

Columns, in order:
- `key`, typed from the table's key type (`str`, `int`, ...; bytes for raw keys);
- windowed tables: `window_start` and `window_end`, UTC timestamps in milliseconds (from the key layout in
  engine.tables.keys: the start is in the key, the end is start + size, or in the key too for sessions);
- lake tables (Delta, Iceberg): `partition`, the table partition a row lives in, so that one worker's export
  of its own partitions replaces exactly those rows;
- the value: a dataclass `value_type` gives one column per field (named `value_<field>` if it would clash
  with the columns above); anything else is one `value` column.

A type that is not declared (a table with `default=dict`, say) is inferred from the first rows and then held
for the rest of the export, so every partition's file has the same schema.

Decoding works on columns, not rows: JSON records are parsed by Arrow's own JSON reader straight into
columns, JSON scalars in one orjson call per chunk, text keys by one cast of the whole column.
"""

from __future__ import annotations

import dataclasses
import io
import types
import typing
from itertools import islice
from typing import TYPE_CHECKING, Any

from engine.codecs import dumps, loads_many
from engine.errors import EngineError, ExportError, SchemasNotCached
from engine.export.optional import needs
from engine.tables.keys import META_PREFIX, session_key, split_window_key, window_bounds, window_inner_key
from engine.tables.versions import DELETION, OPEN_MS

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from engine.codecs import Codec
    from engine.stores import StoreView
    from engine.tables.base import BaseTable

KEY, WINDOW_START, WINDOW_END, PARTITION, VALUE = "key", "window_start", "window_end", "partition", "value"
VALID_FROM, VALID_TO = "valid_from", "valid_to"  # a versioned table's rows: each version's validity
# The codecs whose bytes Arrow's JSON reader and orjson parse as they are; any other (Avro, Protobuf, JSON
# Schema in Confluent's wire format) is decoded by its codec and written as engine's JSON first.
PARSED_AS_JSON = frozenset({"json"})
# Rows decoded at once. A chunk's pairs are Python objects until Arrow has them (far larger than Arrow's), and
# an export has several chunks in flight (its decoding threads, the batches waiting for the writer); lake
# writers gather batches into their own row groups, so a smaller chunk costs them nothing.
CHUNK = 16_384
INFER_ROWS = 1024  # an undeclared type is inferred from this many rows (decoded again when written)


def arrow_type(type_: Any) -> pa.DataType | None:
    """The Arrow type of a Python type annotation, or None when it must be inferred from the data."""
    with needs("pyarrow", "table export"):
        import pyarrow as pa
    scalars = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(), bytes: pa.binary()}
    if type_ in scalars:
        return scalars[type_]
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return arrow_type(rest[0]) if len(rest) == 1 else None
    if origin is list and len(args) == 1:
        inner = arrow_type(args[0])
        return pa.list_(inner) if inner is not None else None
    if dataclasses.is_dataclass(type_) and isinstance(type_, type):
        hints = typing.get_type_hints(type_)
        fields = []
        for field in dataclasses.fields(type_):
            field_type = arrow_type(hints.get(field.name, Any))
            if field_type is None:
                return None
            fields.append(pa.field(field.name, field_type))
        return pa.struct(fields)
    # Anything else is inferred from the rows: a pydantic model's JSON may hold more than its declared
    # fields (computed fields, extras, aliases), so its columns are the ones its records have.
    return None


def _codec_type(codec: Codec, declared: Any) -> pa.DataType | None:
    with needs("pyarrow", "table export"):
        import pyarrow as pa
    if codec.name == "str":
        return pa.string()
    if codec.name == "raw":
        return pa.binary()
    return arrow_type(declared)


class TableColumns:
    """Decodes one table's raw store pairs into record batches of a schema that stays fixed."""

    def __init__(self, table: BaseTable, *, partition_column: bool = False) -> None:
        with needs("pyarrow", "table export"):
            import pyarrow
        self.pa = pyarrow
        self.table = table
        self.partition_column = partition_column
        self.window = table.window
        topic = table.changelog_topic
        self.key_codec: Codec = table.plain_key_codec
        # A versioned table's rows are its versions, each with its validity (engine.tables.versioned): the
        # values are its row codec's, once `version_rows` took the tag off.
        self.value_codec: Codec = table.row_codec
        self.versioned = table.key_layout == "versioned"
        value_type: Any = topic.value_type
        if value_type is None and table.default in (int, float, str, bool):
            value_type = table.default  # `default=int` says what the values are
        self.key_type = _codec_type(self.key_codec, topic.key_type)
        self.value_type = _codec_type(self.value_codec, value_type)
        self.schema: pa.Schema | None = None
        self.flatten = False  # one column per field of a record value
        if self.key_type is not None and self.value_type is not None:
            self._fix_schema(self.key_type, self.value_type)

    # -- schema -------------------------------------------------------------------------------------

    def _fix_schema(self, key_type: pa.DataType, value_type: pa.DataType) -> pa.Schema:
        pa = self.pa
        self.key_type, self.value_type = key_type, value_type
        self.flatten = pa.types.is_struct(value_type) and value_type.num_fields > 0
        fields = [pa.field(KEY, key_type, nullable=False)]
        if self.versioned:
            stamp = pa.timestamp("ms", tz="UTC")
            fields += [pa.field(VALID_FROM, stamp, nullable=False), pa.field(VALID_TO, stamp)]
        elif self.window is not None:
            stamp = pa.timestamp("ms", tz="UTC")
            fields += [pa.field(WINDOW_START, stamp, nullable=False),
                       pa.field(WINDOW_END, stamp, nullable=False)]
        if self.partition_column:
            fields.append(pa.field(PARTITION, pa.int32(), nullable=False))
        if self.flatten:
            taken = {f.name for f in fields}
            fields += [pa.field(f"{VALUE}_{f.name}" if f.name in taken else f.name, f.type)
                       for f in value_type]
        else:
            fields.append(pa.field(VALUE, value_type))
        self.schema = pa.schema(fields)
        return self.schema

    def infer(self, views: list[StoreView]) -> pa.Schema:
        """Fix the schema before anything is written: from declared types, else from the first rows found
        (every partition's rows then get that one schema)."""
        for view in views:
            if self.schema is not None:
                break
            for _ in self.batches(view, INFER_ROWS):
                break  # the first batch fixes the schema
        return self.final_schema()

    def final_schema(self) -> pa.Schema:
        """The schema, also when no row was seen to infer an undeclared type from (then it is text)."""
        if self.schema is None:
            return self._fix_schema(self.key_type or self.pa.string(), self.value_type or self.pa.string())
        return self.schema

    # -- decoding -----------------------------------------------------------------------------------

    def batches(self, view: StoreView, chunk: int = CHUNK, partition: int = 0) -> Iterator[pa.RecordBatch]:
        """Record batches of at most `chunk` rows of a view (of table partition `partition`). Engine's own
        records (a windowed table's stream time) sort after every key (META_PREFIX), so the scan simply
        stops before them."""
        pairs = iter(view.items(None, META_PREFIX if self.window is not None else None))
        if self.versioned:
            pairs = version_rows(pairs)
        while True:
            taken = list(islice(pairs, chunk))
            if not taken:
                return
            yield self.batch([key for key, _ in taken], [value for _, value in taken], partition)

    def batch(self, keys: list[bytes], values: list[bytes], partition: int = 0) -> pa.RecordBatch:
        columns = self._key_columns(keys, partition)
        value_column = self._decode(self.value_codec, values, self.value_type, "value")
        schema = self.schema or self._fix_schema(columns[0].type, value_column.type)
        columns += value_column.flatten() if self.flatten else [value_column]
        return self.pa.RecordBatch.from_arrays(columns, schema=schema)

    def key_values(self, keys: list[bytes]) -> list[Any]:
        """The key column's values of encoded keys (a windowed table's inner keys)."""
        return list(self._decode(self.key_codec, keys, self.key_type, "key").to_pylist())

    def _key_columns(self, keys: list[bytes], partition: int) -> list[Any]:
        pa = self.pa
        columns: list[Any] = []
        if self.window is None:
            columns.append(self._decode(self.key_codec, keys, self.key_type, "key"))
        else:
            inner = [window_inner_key(raw) for raw in keys]
            size = getattr(self.window, "size_ms", None)  # (None for sessions: their keys have their end)
            bounds = [window_bounds(raw, size) for raw in keys]
            stamp = pa.timestamp("ms", tz="UTC")
            ends = [None if self.versioned and end == OPEN_MS else end for _, end in bounds]
            columns += [self._decode(self.key_codec, inner, self.key_type, "key"),
                        pa.array([start for start, _ in bounds], pa.int64()).cast(stamp),
                        pa.array(ends, pa.int64()).cast(stamp)]
        if self.partition_column:
            columns.append(pa.array([partition] * len(keys), pa.int32()))
        return columns

    def _decode(self, codec: Codec, raw: list[bytes], type_: pa.DataType | None, what: str) -> Any:
        pa = self.pa
        try:
            if codec.name == "raw":
                return pa.array(raw, pa.binary())
            if codec.name == "str":
                return pa.array(raw, pa.binary()).cast(pa.string())
            if codec.name not in PARSED_AS_JSON:  # a registry format (engine.schemas): its records as JSON
                raw = self._as_json(codec, raw, what)
            records = pa.types.is_struct(type_) if type_ is not None else raw[0][:1] == b"{"
            if records:
                return self._json_records(raw, type_)
            return pa.array(loads_many(raw), type_)
        except ExportError:
            raise
        except (pa.ArrowInvalid, pa.ArrowTypeError, EngineError) as exc:
            expected = f" as {type_}" if type_ is not None else ""
            raise ExportError(
                f"table {self.table.name!r}: stored {what}s cannot be read{expected}: {exc}; declare the "
                f"table's {what}_type so that every partition exports with the same schema"
            ) from exc

    def _as_json(self, codec: Codec, raw: list[bytes], what: str) -> list[bytes]:
        """Stored records of a registry format, decoded by their codec and written as engine's JSON."""
        try:
            return [dumps(value) for value in codec.decode_many(list[bytes | None](raw))]
        except SchemasNotCached as exc:
            raise ExportError(
                f"table {self.table.name!r}: its {what}s are in a schema registry format and the registry's "
                f"schemas are not known here ({exc}); give the settings the registry (schema_registry_url), "
                "or export from a worker (a live or scheduled export)") from exc
        except TypeError as exc:  # (a value JSON cannot hold: Avro bytes, a Decimal)
            raise ExportError(f"table {self.table.name!r}: a stored {what} cannot be exported: "
                              f"{exc}") from exc

    def _json_records(self, raw: list[bytes], type_: pa.DataType | None) -> Any:
        """JSON objects through Arrow's JSON reader: columns come out without a Python object per row."""
        pa = self.pa
        with needs("pyarrow", "table export"):
            import pyarrow.json as json
        options = json.ParseOptions(
            explicit_schema=pa.schema(list(type_)) if type_ is not None else None,
            newlines_in_values=not self.table.has_own_changelog,  # others' JSON may be pretty-printed
            unexpected_field_behavior="error" if type_ is not None else "infer",
        )
        parsed = json.read_json(io.BytesIO(b"\n".join(raw)), parse_options=options)
        if parsed.num_rows != len(raw):
            raise ExportError(f"table {self.table.name!r}: {len(raw)} stored values gave "
                              f"{parsed.num_rows} rows")
        return parsed.to_struct_array().combine_chunks()


def version_rows(pairs: Iterator[tuple[bytes, bytes]], raw_keys: set[bytes] | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
    """A versioned table's stored (key, version time) pairs, key by key in time order, as rows: each
    version's key with its validity (valid from its time until the key's next version, or OPEN_MS for the
    latest; the layout of a session key, engine.tables.keys), its value without the tag; deletions only
    end the version before them. `raw_keys` collects the store keys read."""
    held: tuple[bytes, int, bytes] | None = None  # the version read last: (inner key, time, tagged value)
    for raw, tagged in pairs:
        if raw_keys is not None:
            raw_keys.add(raw)
        inner, at = split_window_key(raw)
        if held is not None:
            last_inner, last_at, last_value = held
            if last_value != DELETION:
                end = at if last_inner == inner else OPEN_MS
                yield session_key(last_inner, last_at, end), last_value[1:]
        held = (inner, at, tagged)
    if held is not None and held[2] != DELETION:
        yield session_key(held[0], held[1], OPEN_MS), held[2][1:]
