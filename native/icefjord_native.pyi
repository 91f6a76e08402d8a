"""Types of the compiled paths: the normalizer's records (``native/src/lib.rs``, see
``services/cdc_normalizer/native_row.py``) and the writer's changes (``native/src/change.rs``,
see ``services/iceberg_writer/native_changes.py``)."""

# (field name, kind, a, b, optional); an array column's kind is "items:<kind>" or
# "nullable-items:<kind>".
ColumnSpecs = list[tuple[str, str, int, int, bool]]

class RowProgram:
    def __init__(self, columns: ColumnSpecs, placeholder: str, placeholder_base64: str) -> None: ...
    def row(self, image: bytes) -> bytes | None: ...

class RecordProgram:
    def __init__(
        self, row: ColumnSpecs, key: ColumnSpecs, placeholder: str, placeholder_base64: str
    ) -> None: ...
    def record(
        self,
        value: bytes,
        value_start: int,
        value_end: int,
        key: bytes,
        key_start: int,
        key_end: int,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int | None,
    ) -> tuple[str, str, int, bytes, bytes] | None: ...

Target = tuple[str, str, int, int]
# (null count, validity, offsets, data); a list column's items as a second one, with their count.
Items = tuple[int, bytes | None, bytes | None, bytes]
Buffers = tuple[int, bytes | None, bytes | None, bytes, tuple[int, Items] | None]

class ChangeProgram:
    def __init__(self, schema: str, keys: list[str]) -> None: ...
    def decode(
        self, value: bytes, start: int
    ) -> tuple[int, str, int, tuple[int | str, ...], int, tuple[str, ...] | None] | None: ...
    def columns(
        self, rows: list[tuple[bytes, int] | None], targets: list[Target]
    ) -> list[Buffers] | None: ...
