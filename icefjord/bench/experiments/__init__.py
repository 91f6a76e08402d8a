"""One-off measurements behind dated entries of ``docs/benchmarks/HISTORY.md``.

Each module is a script (run it by its path from the repository root, as its docstring
shows, so that ``PYTHONPATH=.icefjord/compiled`` picks the compiled build first) that times
one step outside the services, to decide a change: ``rewrite_ab`` (a compaction repeated
from one table state), ``appends_ab`` (Hadoop's chmod processes per Iceberg commit),
``decode_variants`` and ``records_bench`` (the writer's per-record steps), ``route_bench``
and ``micro_bench`` (the normalizer's). They are kept so a figure in the history can be
measured again; no command, test or service imports them.
"""
