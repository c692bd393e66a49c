"""The generated apache/rocketmq-apis v2 classes, taken from the official Python client's
package (``rocketmq-python-client``, pip extra ``ferrymq[grpc]``): no copy of the ``.proto``
files or of generated code lives in this repository. Import this only once
:func:`ferrymq.grpc.availability.missing` said None."""

from __future__ import annotations

from ferrymq.grpc.availability import load_protocol

_generated = load_protocol()  # the client package's generated modules, without its client (see there)
pb = _generated.definition_pb2
spb = _generated.service_pb2
rpc = _generated.service_pb2_grpc

Code = pb.Code


def status(code: int = pb.Code.OK, message: str = "") -> pb.Status:
    """The ``Status`` every response carries: errors travel here, never as gRPC errors."""
    return pb.Status(code=code, message=message or pb.Code.Name(code))


__all__ = ["Code", "pb", "rpc", "spb", "status"]
