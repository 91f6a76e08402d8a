"""Icefjord's benchmarks, behind ``icefjord bench`` (:mod:`icefjord.bench.cli`)."""
