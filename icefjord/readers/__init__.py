"""Reading Icefjord's Iceberg tables with each engine analysts use (``engines``), and a
local Trino to read them with (``trino``)."""
