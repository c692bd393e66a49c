"""The name-server address service (rocketmq.namesrv.domain): it serves the name servers
that answer; a broker and a client given only the service find them, and a name server
added (or gone) reaches both without restarts."""

from __future__ import annotations

import aiohttp
import pytest

from ferrymq.broker.broker import Broker
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.client.producer import Producer
from ferrymq.common.address_lookup import address_server_url, fetch_namesrv_addr
from ferrymq.common.message import Message
from ferrymq.namesrv.address_server import NamesrvAddressBook, NamesrvAddressServer
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
from ferrymq.store.config import StoreConfig
from tests.consumer_support import read_all
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import wait_until


async def name_server() -> NameServer:
    ns = NameServer(NamesrvConfig(listen_port=0))
    await ns.start()
    return ns


def test_the_url_is_rocketmqs():
    assert address_server_url("jmenv.tbsite.net") == "http://jmenv.tbsite.net:8080/rocketmq/nsaddr"
    assert address_server_url("10.0.0.5:9000", "prod") == "http://10.0.0.5:9000/rocketmq/prod"
    assert address_server_url("ns.example", "nsaddr", "unit1") == "http://ns.example:8080/rocketmq/nsaddr-unit1?nofix=1"


async def test_only_name_servers_that_answer_are_served(tmp_path):
    ns = await name_server()
    listing = tmp_path / "namesrvs"
    dead = f"127.0.0.1:{free_port()}"
    listing.write_text(f"{ns.address}\n{dead}\n")
    service = NamesrvAddressServer("127.0.0.1", 0, NamesrvAddressBook(file=str(listing), probe_interval=0.2))
    await service.start()
    try:
        assert await fetch_namesrv_addr(service.url) == ns.address
        await ns.stop()
        await wait_until(lambda: not service.live, 5, "the stopped name server dropped")
        async with aiohttp.ClientSession() as session, session.get(service.url) as response:
            assert response.status == 503 and "no live name server" in await response.text()
        assert await fetch_namesrv_addr(service.url) is None  # a client keeps its last list
    finally:
        await service.stop()


async def test_broker_and_client_follow_the_service_as_name_servers_come_and_go(tmp_path):
    ns1 = await name_server()
    listing = tmp_path / "namesrvs"
    listing.write_text(ns1.address + "\n")
    service = NamesrvAddressServer("127.0.0.1", 0, NamesrvAddressBook(file=str(listing), probe_interval=0.2))
    await service.start()
    domain = f"127.0.0.1:{service.port}"
    broker = Broker(BrokerConfig(listen_port=0, namesrv_addr="", fetch_namesrv_addr_by_address_server=True,
                                 rmq_address_server_domain=domain, fetch_name_srv_addr_interval=300),
                    StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 << 20))
    ns2 = None
    try:
        await broker.start()
        await wait_until(broker.registered.is_set, 10, "registered through the service")
        config = ClientConfig(namesrv_addr="", namesrv_domain=domain, fetch_namesrv_interval=0.3)
        async with Producer("nsaddr-test", config=config) as producer:
            await producer.send(Message("Found", b"through the address service"))
            assert config.namesrv_addr == ns1.address

            ns2 = await name_server()
            listing.write_text(f"{ns1.address}\n{ns2.address}\n")
            await wait_until(lambda: ns2.address in config.namesrv_addr, 5, "the client learned the new name server")

            async def broker_on_ns2():
                async with AdminClient(namesrv_addr=ns2.address) as admin:
                    return (await admin.cluster_info()).broker_addr_table
            await wait_until(broker_on_ns2, 10, "the broker registered with the new name server")

            await ns1.stop()
            await wait_until(lambda: config.namesrv_addr == ns2.address, 5, "the client dropped the stopped one")
            producer.instance.routes.clear()  # routes come from the one left
            await producer.send(Message("Found", b"after the first name server left"))
        assert sorted(m.body for m in await read_all(ns2.address, "Found")) == [
            b"after the first name server left", b"through the address service"]
    finally:
        await broker.stop()
        await service.stop()
        for ns in (ns1, ns2):
            if ns is not None:
                await ns.stop()


@pytest.mark.parametrize("body, expected", [("10.0.0.1:9876;10.0.0.2:9876\r\nignored", "10.0.0.1:9876;10.0.0.2:9876"),
                                            ("  \n", None)])
async def test_the_first_line_of_the_answer_is_the_list(body, expected):
    from aiohttp import web

    async def answer(request):
        return web.Response(text=body)

    app = web.Application()
    app.router.add_get("/rocketmq/nsaddr", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        assert await fetch_namesrv_addr(address_server_url(f"127.0.0.1:{port}")) == expected
    finally:
        await runner.cleanup()


async def test_a_name_server_serves_the_address_list_on_its_http_port(tmp_path):
    """What the operator runs: every name-server pod answers for the headless Service's name."""
    port, http = free_port(), free_port()
    proc = FerryProcess(["namesrv", "--port", str(port), "--http-port", str(http),
                         "--address-service-dns", f"localhost:{port}"], "name server is ready",
                        tmp_path / "namesrv.log").start()
    try:
        assert await fetch_namesrv_addr(address_server_url(f"127.0.0.1:{http}")) == f"127.0.0.1:{port}"
    finally:
        proc.stop()
