"""Build hook. Metadata lives in pyproject.toml; this file only adds the compiled build.

With ``ICEFJORD_MYPYC=1`` the cdc-normalizer's per-record modules, and the Avro decoder the
iceberg-writer shares with it, are compiled with mypyc (as black ships its wheels): the same
typed Python, about twice as fast per record. It needs
mypy (a dev dependency), gcc and the Python headers, and ``--no-build-isolation`` so mypy
sees the installed dependencies:

    ICEFJORD_MYPYC=1 .venv/bin/pip wheel --no-deps --no-build-isolation -w dist .

Without the variable (editable installs, CI) nothing is compiled. ``ICEFJORD_MYPYC_ONLY``
(packages, space-separated, e.g. ``"shared services.iceberg_writer"``) compiles only the modules
under them: a service image compiles what it runs, with only its own dependencies installed.
"""

import os

from setuptools import setup

COMPILED = ["shared/avro_decoder.py"] + [
    f"services/cdc_normalizer/{name}.py"
    for name in (
        "avro_encoder",
        "caching",
        "connect_schema",
        "converters",
        "envelope",
        "logical_types",
        "normalize",
        "pipeline",
        "plan",
        "position",
        "table_schema",
        "temporal",
    )
]

ONLY = os.environ.get("ICEFJORD_MYPYC_ONLY", "").split()
if ONLY:
    COMPILED = [p for p in COMPILED if any(p.startswith(f"{o.replace('.', '/')}/") for o in ONLY)]

ext_modules = []
if os.environ.get("ICEFJORD_MYPYC") == "1" and COMPILED:
    from mypyc.build import mypycify

    ext_modules = mypycify(COMPILED, opt_level="3")

setup(ext_modules=ext_modules)
