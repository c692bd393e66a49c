"""A v2 client's Telemetry stream as the broker's producer table sees it.

The broker's transaction check-back (broker/transactions.py) asks one online producer of a
half message's group with a oneway CHECK_TRANSACTION_STATE on the producer's connection. A
5.x producer has no remoting connection: its Telemetry stream stands in for one. The check
becomes a ``RecoverOrphanedTransactionCommand`` (the half message and a transaction id) on the
stream; the producer's TransactionChecker answers with EndTransaction (source SERVER_CHECK).
"""

from __future__ import annotations

import asyncio

from ferrymq.common.message import Prop, decode_record
from ferrymq.grpc.messages import incoming, transaction_id
from ferrymq.grpc.protocol import spb
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import CheckTransactionStateHeader

MAX_QUEUED = 1024  # commands waiting for a slow stream; more are refused (the check comes again)


class TelemetrySession:
    """What the producer table needs of a connection: a peer address and ``invoke_oneway``."""

    def __init__(self, client_id: str, remote_address: tuple[str, int]) -> None:
        self.client_id = client_id
        self.remote_address = remote_address
        self.attributes: dict = {}
        self.outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(MAX_QUEUED)
        self.topics: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"<TelemetrySession {self.client_id} {self.remote_address[0]}:{self.remote_address[1]}>"

    async def invoke_oneway(self, request: RemotingCommand, timeout: float = 3.0) -> None:
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            raise RemotingError(f"a gRPC client cannot take request code {request.code}")
        half = decode_record(request.body or b"")[0]
        check = CheckTransactionStateHeader.read(request)
        tx_id = transaction_id(check.commit_log_offset, check.tran_state_table_offset, half.client_msg_id)
        message = incoming(half, topic=half.properties.get(Prop.REAL_TOPIC, half.topic), receipt_handle="",
                           delivery_attempt=0, invisible_ms=0)
        command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=tx_id))
        try:
            self.outbox.put_nowait(command)
        except asyncio.QueueFull:
            raise RemotingError(f"telemetry stream of {self.client_id} is not reading") from None

    def close(self) -> None:
        try:
            self.outbox.put_nowait(None)
        except asyncio.QueueFull:
            pass
