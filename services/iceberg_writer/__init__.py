"""iceberg-writer: normalized change records into Iceberg tables, exactly once, through Spark."""
