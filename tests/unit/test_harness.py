"""The tests' own helpers: ports for the processes a test starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from harness import ephemeral_low, free_port

pytestmark = pytest.mark.unit


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < ephemeral_low() for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_the_ephemeral_range_is_read_from_the_kernel_or_assumed(tmp_path: Path) -> None:
    given = tmp_path / "ip_local_port_range"
    given.write_text("40000\t60999\n")
    assert ephemeral_low(given) == 40000
    assert ephemeral_low(tmp_path / "missing") == 32768
    given.write_text("garbage")
    assert ephemeral_low(given) == 32768
