"""Whether this machine can serve gRPC: the generated apache/rocketmq-apis v2 classes come from
the official Python client's package, installed by the optional ``grpc`` extra."""

from __future__ import annotations

PACKAGE = "rocketmq-python-client"
INSTALL_HINT = f"install the grpc extra: pip install 'ferrymq[grpc]' (it brings grpcio and {PACKAGE})"


def missing() -> str | None:
    """Why the gRPC endpoint cannot run here, or None when it can."""
    try:
        import grpc  # noqa: F401
        from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc  # noqa: F401
    except ImportError as exc:
        return f"{exc}; {INSTALL_HINT}"
    return None
