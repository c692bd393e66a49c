"""The ACL admin requests mqadmin sends (updateAclConfig, deleteAccessConfig,
updateGlobalWhiteAddr, clusterAclConfigVersion): UPDATE_AND_CREATE_ACL_CONFIG (50),
DELETE_ACL_CONFIG (51), UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53), GET_BROKER_CLUSTER_ACL_INFO (52).

Each change is written into the broker's plain_acl.yml and in force when the answer goes
out. Failures are answered with 4.9's codes (209, 210, 211) and a remark saying why. With
ACL off these codes are refused: there is no file to change.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ferrymq.acl.acl_file import AclFile
from ferrymq.acl.plain_acl import AclConfigError
from ferrymq.broker.config import BrokerConfig
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    BrokerAclConfigResponseHeader,
    CreateAccessConfigHeader,
    DeleteAccessConfigHeader,
    UpdateGlobalWhiteAddrsHeader,
    split_list,
)

class AclAdminProcessors:
    def __init__(self, acl: AclFile | None, config: BrokerConfig, broker_addr) -> None:
        self._acl = acl
        self._config = config
        self._broker_addr = broker_addr  # callable: the advertised address, known once listening

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account,
            RequestCode.DELETE_ACL_CONFIG: self.delete_account,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.config_version,
        }

    async def _edit(self, req: RemotingCommand, failure_code: int, change) -> RemotingCommand:
        if self._acl is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "ACL is not enabled on this broker (aclEnable=false)")
        try:
            await asyncio.to_thread(self._acl.edit, change)
        except (AclConfigError, OSError, KeyError) as exc:
            return req.response(failure_code, str(exc).strip("'\""))
        return req.response(ResponseCode.SUCCESS)

    async def update_account(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        account = CreateAccessConfigHeader.read(req)
        access_key, fields = account.access_key, account.account_fields()

        def change(doc: dict[str, Any]) -> None:
            accounts = doc.setdefault("accounts", []) or []
            doc["accounts"] = accounts
            for account in accounts:
                if isinstance(account, dict) and str(account.get("accessKey")) == access_key:
                    account.update(fields)  # fields the request leaves out keep their values
                    return
            accounts.append({"accessKey": access_key, **fields})

        return await self._edit(req, ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, change)

    async def delete_account(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        access_key = DeleteAccessConfigHeader.read(req).access_key

        def change(doc: dict[str, Any]) -> None:
            accounts = doc.get("accounts") or []
            kept = [a for a in accounts if not (isinstance(a, dict) and str(a.get("accessKey")) == access_key)]
            if len(kept) == len(accounts):
                raise KeyError(f"no account {access_key} in the ACL file")
            doc["accounts"] = kept

        return await self._edit(req, ResponseCode.DELETE_ACL_CONFIG_FAILED, change)

    async def update_global_white(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        addresses = split_list(UpdateGlobalWhiteAddrsHeader.read(req).global_white_addrs)
        return await self._edit(req, ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                                lambda doc: doc.__setitem__("globalWhiteRemoteAddresses", addresses))

    async def config_version(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        if self._acl is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "ACL is not enabled on this broker (aclEnable=false)")
        version = {"timestamp": self._acl.loaded_at_ms, "counter": self._acl.reloads}
        return req.response(ResponseCode.SUCCESS, ext_fields=BrokerAclConfigResponseHeader(
            version=json.dumps(version), all_acl_file_version=json.dumps({str(self._acl.path): version}),
            broker_name=self._config.broker_name, broker_addr=self._broker_addr(),
            cluster_name=self._config.broker_cluster_name,
        ).to_ext_fields())
