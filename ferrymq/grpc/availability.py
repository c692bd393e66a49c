"""Whether this machine can serve gRPC: the generated apache/rocketmq-apis v2 classes come from
the official Python client's package, installed by the optional ``grpc`` extra."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

PACKAGE = "rocketmq-python-client"
INSTALL_HINT = f"install the grpc extra: pip install 'ferrymq[grpc]' (it brings grpcio and {PACKAGE})"


def missing() -> str | None:
    """Why the gRPC endpoint cannot run here, or None when it can."""
    try:
        import grpc  # noqa: F401
        load_protocol()
    except ImportError as exc:
        return f"{exc}; {INSTALL_HINT}"
    return None


def load_protocol() -> types.ModuleType:
    """``rocketmq.grpc_protocol`` (the generated v2 modules) without running the client package's
    ``rocketmq/__init__``: that imports the whole client, whose logging setup creates
    ``~/logs/rocketmq_python`` and installs a file handler at import time: a broker must not write
    into its user's home (a read-only root filesystem in the image makes it fail). A placeholder
    package stands in while the subpackage loads; a later ``import rocketmq`` (the client, in a
    test) runs the real ``__init__`` and reuses the loaded subpackage."""
    name = "rocketmq.grpc_protocol"
    if name in sys.modules or "rocketmq" in sys.modules:
        return importlib.import_module(name)
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"No module named 'rocketmq' ({PACKAGE} is not installed)")
    placeholder = types.ModuleType("rocketmq")
    placeholder.__path__ = list(spec.submodule_search_locations)
    placeholder.__spec__ = spec
    sys.modules["rocketmq"] = placeholder
    try:
        return importlib.import_module(name)
    finally:
        if sys.modules.get("rocketmq") is placeholder:
            del sys.modules["rocketmq"]
