"""END_TRANSACTION (37): a producer's commit or rollback of a half message (usually oneway;
the answer, when asked for, says whether the decision was recorded); END_TRANSACTIONS, FerryMQ's
own: many half messages of one group at once (ferrymq/common/transaction_batches.py)."""

from __future__ import annotations

from ferrymq.broker.transactions import EndTransaction, TransactionService
from ferrymq.common.transaction_batches import Failure, decode_halves, encode_failures
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import EndTransactionHeader, EndTransactionsHeader


class EndTransactionProcessor:
    def __init__(self, transactions: TransactionService) -> None:
        self.transactions = transactions

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        # a missing or malformed field raises HeaderFieldError: the server answers it as a bad request
        header = EndTransactionHeader.read(req)
        request = EndTransaction(
            producer_group=header.producer_group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset, commit_or_rollback=header.commit_or_rollback,
            from_transaction_check=header.from_transaction_check, msg_id=header.msg_id,
            transaction_id=header.transaction_id)
        code, remark = await self.transactions.end(request)
        return req.response(code, remark=remark)


class EndTransactionsProcessor:
    def __init__(self, transactions: TransactionService) -> None:
        self.transactions = transactions

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = EndTransactionsHeader.read(req)
        try:
            halves = decode_halves(req.body or b"")
        except ValueError as e:
            return req.response(ResponseCode.MESSAGE_ILLEGAL, remark=f"END_TRANSACTIONS: {e}")
        outcomes = await self.transactions.end_many(header.producer_group, header.commit_or_rollback, halves)
        failed = [Failure(i, code, remark or "") for i, (code, remark) in enumerate(outcomes)
                  if code != ResponseCode.SUCCESS]
        return req.response(ResponseCode.SUCCESS, body=encode_failures(failed))
