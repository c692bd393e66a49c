"""Transaction headers: END_TRANSACTION (producer to broker), FerryMQ's END_TRANSACTIONS
(ferrymq/common/transaction_batches.py) and CHECK_TRANSACTION_STATE (broker to producer);
docs/wire-format.md#typed-headers."""

from __future__ import annotations

from ferrymq.remoting.headers.base import BOOL, INT, LONG, Header, header, wire


@header
class EndTransactionHeader(Header):
    """END_TRANSACTION (EndTransactionRequestHeader)."""

    producer_group: str = wire("producerGroup", required=True, group="producer")
    tran_state_table_offset: int = wire("tranStateTableOffset", LONG, required=True)
    commit_log_offset: int = wire("commitLogOffset", LONG, required=True)
    commit_or_rollback: int = wire("commitOrRollback", INT, required=True)
    from_transaction_check: bool = wire("fromTransactionCheck", BOOL, False)
    msg_id: str = wire("msgId", default="")
    transaction_id: str = wire("transactionId", default="")


@header
class EndTransactionsHeader(Header):
    """END_TRANSACTIONS (FerryMQ's own): the half messages are in the body."""

    producer_group: str = wire("producerGroup", required=True, group="producer")
    commit_or_rollback: int = wire("commitOrRollback", INT, required=True)


@header
class CheckTransactionStateHeader(Header):
    """CHECK_TRANSACTION_STATE (CheckTransactionStateRequestHeader)."""

    tran_state_table_offset: int = wire("tranStateTableOffset", LONG, required=True)
    commit_log_offset: int = wire("commitLogOffset", LONG, required=True)
    msg_id: str = wire("msgId", default="")
    transaction_id: str = wire("transactionId", default="")
    offset_msg_id: str | None = wire("offsetMsgId")
