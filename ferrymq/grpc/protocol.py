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



class Enum:
    """A v2 enum's values as plain ints by name, and ``Name(number)``: what the generated enum
    wrapper gives, without its lookup on every attribute read (~0.7 µs each, several per send)."""

    def __init__(self, wrapper) -> None:
        values = wrapper.DESCRIPTOR.values
        self.__dict__.update({v.name: v.number for v in values})
        self._names = {v.number: v.name for v in values}
        self._wrapper = wrapper

    def Name(self, number: int) -> str:  # noqa: N802 (the wrapper's spelling)
        name = self._names.get(number)
        return name if name is not None else self._wrapper.Name(number)  # raises as the wrapper does


Code = Enum(pb.Code)
MessageType = Enum(pb.MessageType)
DigestType = Enum(pb.DigestType)
Encoding = Enum(pb.Encoding)


def status(code: int = Code.OK, message: str = "") -> pb.Status:
    """The ``Status`` every response carries: errors travel here, never as gRPC errors."""
    return pb.Status(code=code, message=message or Code.Name(code))


__all__ = ["Code", "DigestType", "Encoding", "Enum", "MessageType", "pb", "rpc", "spb", "status"]
