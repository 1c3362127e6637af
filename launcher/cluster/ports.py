"""Checks that the TCP ports an embedded cluster needs are free before anything starts."""

from __future__ import annotations

import contextlib
import errno
import socket


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    """True when a listener could bind ``port`` (as slurmctld/slurmd do, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def busy_ports(ports: list[int]) -> list[int]:
    """The ports of ``ports`` something already listens on."""
    return [port for port in ports if not port_is_free(port)]


def find_free_port_block(count: int, start: int = 20000, stop: int = 60000) -> int:
    """The first base port >= ``start`` such that base..base+count-1 are all free."""
    base = start
    while base + count <= stop:
        busy = busy_ports(list(range(base, base + count)))
        if not busy:
            return base
        base = max(busy) + 1
    raise RuntimeError(f"no {count} consecutive free ports in {start}..{stop}")


def connectable(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout):
        return True
    return False
