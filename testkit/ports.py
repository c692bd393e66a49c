"""Free TCP ports for the servers tests and benchmarks start."""

from __future__ import annotations

import os
import random
from collections import deque
import socket
import tempfile
from pathlib import Path
from typing import Iterable

# Ports handed out by any process of this machine (test modules run in parallel processes):
# one file per port holding the claimant's pid; a claim of a process that has ended is void.
CLAIMS_DIR = Path(tempfile.gettempdir()) / f"ferrymq-test-ports-{os.getuid()}"
# Ports this process handed out lately: a process may claim its own ports again, so without this
# two draws of one test (two brokers set up before either binds) could get the same port.
_RECENT: deque[int] = deque(maxlen=1536)


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
    are free too, none of them in ``exclude``: usable for any server, and for a broker.

    P is drawn below the kernel's ephemeral range: a port from inside it can be taken as the
    source port of any outgoing connection between the moment it is handed out and the moment
    its server binds it (it happened: a standalone broker of the Spark tests failed with
    EADDRINUSE while three test processes opened connections)."""
    excluded = set(exclude) | set(_RECENT)
    low, high = _static_range()
    for _ in range(400):
        port = random.randrange(low + 2, high)
        if excluded & {port - 2, port, port + 1}:
            continue
        if can_bind(port - 2) and can_bind(port + 1) and can_bind(port) and claim(port - 2, port, port + 1):
            _RECENT.extend((port - 2, port, port + 1))
            return port
    raise RuntimeError(f"could not find three free ports P-2, P, P+1 in {low}-{high}")


def _static_range() -> tuple[int, int]:
    """Ports the kernel never picks for an outgoing connection: from 10000 up to its ephemeral
    range (net.ipv4.ip_local_port_range, 32768-60999 by default), or above it when that range
    starts too low to leave room below."""
    try:
        first, last = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        first, last = 32768, 60999
    if first - 10000 >= 4096:
        return 10000, first - 1
    if 65535 - last >= 4096:
        return last + 1, 65535
    return 1024, 65535  # no static range worth the name: any port, checked as before


def claim(*ports: int) -> bool:
    """Claim ``ports`` for this process, unless another live process of the machine holds one
    of them (a port handed out is free until its server binds it: two parallel test processes
    must not both be given it)."""
    CLAIMS_DIR.mkdir(exist_ok=True)
    mine = os.getpid()
    ticket = CLAIMS_DIR / f".ticket-{mine}"
    ticket.write_text(str(mine))
    taken: list[Path] = []
    try:
        for port in ports:
            path = CLAIMS_DIR / str(port)
            for _ in range(2):
                try:
                    os.link(ticket, path)  # atomic, complete: fails if the port is claimed
                    taken.append(path)
                    break
                except FileExistsError:
                    holder = _holder(path)
                    if holder == mine:
                        break
                    if holder is not None and _alive(holder):
                        break
                    path.unlink(missing_ok=True)  # a claim of a process that has ended
            if path not in taken and _holder(path) != mine:
                for own in taken:
                    own.unlink(missing_ok=True)
                return False
        return True
    finally:
        ticket.unlink(missing_ok=True)


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
