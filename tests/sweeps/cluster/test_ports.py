"""The ports a loopback cluster is told to bind are chosen where the kernel hands out none: a
port picked by binding port 0 sits in the ephemeral range, where any process binding port 0
or opening a connection may take it before the node that was told it starts (a head's GCS
once exited with "Address already in use" so)."""

from __future__ import annotations

import socket

from harness.loopback.host import DEFAULT_EPHEMERAL_PORTS, EXPLICIT_PORTS_FROM, LOOPBACK, ephemeral_ports, free_port


def test_free_ports_come_from_below_the_kernels_ephemeral_range_and_bind():
    low, _ = ephemeral_ports()
    ports = [free_port() for _ in range(50)]
    assert all(EXPLICIT_PORTS_FROM <= port < low for port in ports), ports
    assert len(set(ports)) > 40          # drawn at random, not one port handed to every node
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind((LOOPBACK, port))


def test_the_ephemeral_range_is_the_kernels_or_linuxs_default(tmp_path):
    stated = tmp_path / "ip_local_port_range"
    stated.write_text("40000\t50000\n")
    assert ephemeral_ports(stated) == (40000, 50000)
    assert ephemeral_ports(tmp_path / "absent") == DEFAULT_EPHEMERAL_PORTS
    stated.write_text("garbage\n")
    assert ephemeral_ports(stated) == DEFAULT_EPHEMERAL_PORTS
