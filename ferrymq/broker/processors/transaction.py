"""END_TRANSACTION (37): a producer's commit or rollback of a half message (usually oneway;
the answer, when asked for, says whether the decision was recorded)."""

from __future__ import annotations

from ferrymq.broker.transactions import EndTransaction, TransactionService
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection


class EndTransactionProcessor:
    def __init__(self, transactions: TransactionService) -> None:
        self.transactions = transactions

    async def __call__(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        # a missing or malformed field raises HeaderFieldError: the server answers it as a bad request
        request = EndTransaction(
            producer_group=req.get_str("producerGroup", required=True),
            tran_state_table_offset=req.get_long("tranStateTableOffset", required=True),
            commit_log_offset=req.get_long("commitLogOffset", required=True),
            commit_or_rollback=req.get_int("commitOrRollback", required=True),
            from_transaction_check=req.get_bool("fromTransactionCheck", False),
            msg_id=req.get_str("msgId", ""), transaction_id=req.get_str("transactionId", ""))
        code, remark = await self.transactions.end(request)
        return req.response(code, remark=remark)
