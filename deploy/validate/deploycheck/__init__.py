"""Offline validation of Icefjord's deployment artefacts (no Docker engine, no cluster).

Each check module exposes ``check(ctx: Context) -> list[Problem]`` and reports every problem
with the file it is in. Run all of them with ``deploy/validate/run.sh`` (or
``python -m deploycheck`` with ``deploy/validate`` on ``sys.path``).
"""
