"""cdc-normalizer: Debezium change events in, normalized Icefjord change records out.

The pure core lives in :mod:`.normalize` (envelopes -> :class:`~.normalize.Change`),
:mod:`.logical_types` (type mapping and value conversion), :mod:`.position` (sortable source
positions) and :mod:`.table_schema` (per-table Avro schemas). See README.md in this folder.
"""
