"""Host addresses."""

import socket


def local_ip() -> str:
    """This host's primary IPv4 address, found without sending anything (a UDP connect
    only picks a route); 127.0.0.1 on a host without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
