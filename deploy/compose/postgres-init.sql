-- One server, two databases: the registry's storage and the Iceberg JDBC catalog.
CREATE DATABASE registry OWNER icefjord;
CREATE DATABASE catalog OWNER icefjord;
