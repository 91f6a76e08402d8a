"""Fast initial load: whole source tables copied to Parquet in one consistent snapshot."""

from icefjord.bulk.postgres import CopiedTable, UnsupportedColumn, copy_table

__all__ = ["CopiedTable", "UnsupportedColumn", "copy_table"]
