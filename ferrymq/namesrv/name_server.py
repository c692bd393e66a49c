"""The name server: brokers register here, clients ask it where a topic's queues live.

One RemotingServer, one processor per request code, the route table in :mod:`route_info`,
and a task that forgets brokers that stopped registering (120 s, checked every 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from dataclasses import dataclass

from ferrymq.acl.access_validator import NAMESRV_ADMIN_CODES, AccessValidator, AclGuard
from ferrymq.acl.acl_file import AclFile, default_acl_path
from ferrymq.common.protocol import (
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
)
from ferrymq.namesrv.metrics import namesrv_registry
from ferrymq.namesrv.route_info import RouteInfo
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.connection import Connection
from ferrymq.remoting.headers import (
    DeleteTopicFromNamesrvHeader,
    GetRouteInfoHeader,
    KVConfigHeader,
    KVConfigResponseHeader,
    KVListHeader,
    PutKVConfigHeader,
    QueryDataVersionHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerHeader,
    RegisterBrokerResponseHeader,
    TopicsByClusterHeader,
    UnregisterBrokerHeader,
)
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ServerTls

log = logging.getLogger(__name__)

# Requests of this version or newer get standard JSON route data (quoted number keys).
STANDARD_JSON_ROUTE_VERSION = 401
# Before this version REGISTER_BROKER carried a bare TopicConfigSerializeWrapper.
REGISTER_BODY_VERSION = 37


@dataclass
class NamesrvConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9876
    broker_expire_seconds: float = 120.0
    scan_interval_seconds: float = 10.0
    order_message_enable: bool = False
    server_channel_max_idle_time_seconds: float = 120.0  # idle connections closed (0: never)
    # TLS on the listening port, as the broker's (see BrokerConfig.tls_mode)
    tls_mode: str = "disabled"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_cert_reload_interval_seconds: float = 10.0  # renewed certificate files served without a restart; 0: off
    # Plain ACL for the requests that change the name server (NAMESRV_ADMIN_CODES): signed
    # by an admin account of acl_file (see BrokerConfig.acl_enable).
    acl_enable: bool = False
    acl_file: str = ""


class NameServer:
    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.config = config or NamesrvConfig()
        self.routes = RouteInfo()
        self.kv: dict[str, dict[str, str]] = {}
        tls = ServerTls.build(self.config.tls_mode, self.config.tls_server_cert_path, self.config.tls_server_key_path,
                              reload_interval=self.config.tls_cert_reload_interval_seconds)
        self.server = RemotingServer(self.config.listen_host, self.config.listen_port, name="namesrv", tls=tls,
                                     max_idle_seconds=self.config.server_channel_max_idle_time_seconds)
        self._scan_task: asyncio.Task | None = None
        self._acl_task: asyncio.Task | None = None
        handlers = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
        }
        for code, handler in handlers.items():
            self.server.register(code, handler)
        self.server.add_connection_listener(on_close=self.routes.remove_by_connection)
        self.metrics_registry = namesrv_registry(self.routes, lambda: len(self.server.connections))
        self.serving = False

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    async def start(self) -> None:
        if self.config.acl_enable:
            acl = AclFile(self.config.acl_file or default_acl_path())
            await asyncio.to_thread(acl.load)
            self.server.set_request_guard(AclGuard(AccessValidator(lambda: acl.config), only=NAMESRV_ADMIN_CODES))
            self._acl_task = asyncio.create_task(acl.watch(), name="namesrv-acl-reload")
        await self.server.start()
        self.serving = True
        self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-broker-expiry")
        log.info("name server listening on %s", self.address)

    def readiness(self) -> tuple[bool, str]:
        return (True, "") if self.serving else (False, "name server not serving")

    async def stop(self) -> None:
        self.serving = False
        for task in (self._scan_task, self._acl_task):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.server.stop()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_interval_seconds)
            self.routes.expire(self.config.broker_expire_seconds)

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = req.body or b""
        header = RegisterBrokerHeader.read(req)
        if header.body_crc32 and (zlib.crc32(body) & 0x7FFFFFFF) != header.body_crc32:
            return req.response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        topics = None
        if body:
            if header.compressed:
                return req.response(ResponseCode.SYSTEM_ERROR, remark="compressed registration is not supported; set compressedRegister=false")
            if req.version >= REGISTER_BODY_VERSION:
                topics = RegisterBrokerBody.from_json(body).topic_config_serialize_wrapper
            else:
                topics = TopicConfigSerializeWrapper.from_json(body)
        result = self.routes.register_broker(header.cluster_name, header.broker_addr, header.broker_name,
                                             header.broker_id, header.ha_server_addr, topics, conn)
        order_conf = KVTable(dict(self.kv.get("ORDER_TOPIC_CONFIG", {})))
        answer = RegisterBrokerResponseHeader(master_addr=result.master_addr, ha_server_addr=result.ha_server_addr)
        return req.response(ext_fields=answer.to_ext_fields(), body=order_conf.to_json())

    async def unregister_broker(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = UnregisterBrokerHeader.read(req)
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return req.response()

    async def query_data_version(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        addr = QueryDataVersionHeader.read(req).broker_addr
        version = DataVersion.from_json(req.body or b"{}")
        changed = self.routes.is_changed(addr, version)
        self.routes.touch(addr)
        live = self.routes.broker_live_table.get(addr)
        body = live.data_version.to_json() if live else None
        return req.response(ext_fields=QueryDataVersionResponseHeader(changed=changed).to_ext_fields(), body=body)

    # ------------------------------------------------------------------ routes

    async def get_route(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = GetRouteInfoHeader.read(req)
        topic = header.topic
        route = self.routes.topic_route(topic)
        if route is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"No topic route info in name server for the topic: {topic}")
        if self.config.order_message_enable:
            route.order_topic_conf = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(topic)
        standard = req.version >= STANDARD_JSON_ROUTE_VERSION or header.accept_standard_json_only
        return req.response(body=route.to_json(standard=standard))

    async def get_cluster_info(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response(body=self.routes.cluster_info().to_json())

    async def get_all_topics(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        return req.response(body=TopicList(self.routes.all_topics()).to_json())

    async def get_topics_by_cluster(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        cluster = TopicsByClusterHeader.read(req).cluster
        return req.response(body=TopicList(self.routes.topics_by_cluster(cluster)).to_json())

    async def delete_topic(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = DeleteTopicFromNamesrvHeader.read(req)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return req.response()

    # ------------------------------------------------------------------ KV config

    async def put_kv(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = PutKVConfigHeader.read(req)
        self.kv.setdefault(header.namespace, {})[header.key] = header.value
        return req.response()

    async def get_kv(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = KVConfigHeader.read(req)
        namespace, key = header.namespace, header.key
        value = self.kv.get(namespace, {}).get(key)
        if value is None:
            return req.response(ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {namespace} Key: {key}")
        return req.response(ext_fields=KVConfigResponseHeader(value=value).to_ext_fields())

    async def delete_kv(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = KVConfigHeader.read(req)
        self.kv.get(header.namespace, {}).pop(header.key, None)
        return req.response()

    async def get_kv_list(self, req: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = KVListHeader.read(req).namespace
        table = self.kv.get(namespace)
        if not table:
            return req.response(ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {namespace}")
        return req.response(body=KVTable(dict(table)).to_json())
