"""Types of the compiled record path (``native/src/lib.rs``); see
``services/cdc_normalizer/native_row.py``."""

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
