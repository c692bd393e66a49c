"""Free TCP ports for the servers tests and benchmarks start."""

from __future__ import annotations

import socket
from typing import Iterable


def can_bind(port: int) -> bool:
    """Whether ``port`` can be bound on the wildcard address now (servers listen on 0.0.0.0 or
    127.0.0.1; a port taken on either is not free on the wildcard)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port(exclude: Iterable[int] = ()) -> int:
    """A free TCP port P such that P-2 (a RocketMQ broker's VIP channel) and P+1 (its HA port)
    are free too, none of them in ``exclude``: usable for any server, and for a broker."""
    excluded = set(exclude)
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port - 2 < 1024 or port + 1 > 65535 or excluded & {port - 2, port, port + 1}:
            continue
        if can_bind(port - 2) and can_bind(port + 1) and can_bind(port):
            return port
    raise RuntimeError("could not find three free ports P-2, P, P+1")
