"""``ferrymq standalone``, ``ferrymq namesrv`` and ``ferrymq broker``: run until SIGTERM/SIGINT,
then shut down cleanly (held pulls answered, offsets and config persisted, store flushed)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from ferrymq.broker.broker import Broker
from ferrymq.broker.config import BrokerConfig, load_broker_settings
from ferrymq.cli import controller_options
from ferrymq.common import gc_tuning
from ferrymq.common.config_loader import apply_settings
from ferrymq.common.http_endpoints import HttpEndpoints
from ferrymq.common.tasks import within
from ferrymq.controller.controller import ControllerConfig
from ferrymq.grpc.wiring import broker_grpc
from ferrymq.namesrv.address_server import ADDRESS_ROUTE, NamesrvAddressBook, NamesrvAddressServer
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
from ferrymq.store.config import StoreConfig


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    """TLS on the port of a name server or controller (a broker takes the keys of broker.conf)."""
    p.add_argument("--tls-mode", default="disabled", choices=["disabled", "permissive", "enforcing"],
                   help="TLS on the port (default disabled)")
    p.add_argument("--tls-cert", default="", help="server certificate (PEM) for --tls-mode")
    p.add_argument("--tls-key", default="", help="its private key (PEM)")
    p.add_argument("--tls-reload-interval", type=float, default=10.0,
                   help="seconds between looks at the certificate files: a renewed one is served to new "
                        "connections without a restart (default 10; 0 = read once at start)")


def add_server_arguments(p: argparse.ArgumentParser, *, namesrv: bool, broker: bool) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--http-port", type=int, default=None,
                   help="serve /healthz, /readyz and /metrics on this port (default: off; 0 = any free port)")
    if namesrv:
        names = ["--namesrv-port"] if broker else ["--port", "--namesrv-port"]
        p.add_argument(*names, dest="namesrv_port", type=int, default=9876, help="name server port (default 9876)")
    if namesrv and not broker:
        add_tls_arguments(p)
        p.add_argument("--acl-file", default=None,
                       help="plain_acl.yml: requests that change the name server need an admin account's signature")
        p.add_argument("--address-service-dns", default="",
                       help="also serve the live name servers at /rocketmq/<subgroup> on --http-port (the address "
                            'service of rocketmq.namesrv.domain), resolving this name, e.g. "ns-headless:9876"')
    if broker:
        p.add_argument("--broker-port", type=int, default=None,
                       help="broker port (default: listenPort from the config, 10911)")
        p.add_argument("--data-dir", default=None, help="store directory (default ./.data)")
        p.add_argument("-c", "--config", dest="conf_file", help="broker.conf with RocketMQ keys")
        p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                       help="a RocketMQ config key, e.g. --set flushDiskType=SYNC_FLUSH (repeatable)")


def broker_settings(args: argparse.Namespace, namesrv_addr: str | None):
    """BrokerConfig and StoreConfig from broker.conf, then ``--set``, then the flags; every
    value validated."""
    flags = {"listenHost": args.host, "listenPort": args.broker_port, "namesrvAddr": namesrv_addr}
    broker_config, store_config = load_broker_settings(args.conf_file, args.settings, flags)
    if args.data_dir or not store_config.store_path_root_dir:
        apply_settings({"storePathRootDir": str(Path(args.data_dir or ".data").resolve())}, store_config)
    return broker_config, store_config


def new_broker(broker_config: BrokerConfig, store_config: StoreConfig) -> Broker:
    """A broker with its gRPC endpoint when ``grpcListenPort`` asks for one (ConfigError, before
    anything starts, when it cannot run here)."""
    return Broker(broker_config, store_config, grpc=broker_grpc(broker_config))


def build_broker(args: argparse.Namespace, namesrv_addr: str | None) -> Broker:
    return new_broker(*broker_settings(args, namesrv_addr))


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT. Installed first thing, so a signal that comes
    during start-up also leads to a clean shutdown instead of killing the process."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until(stop: asyncio.Event, coro) -> None:
    """Run ``coro`` unless a stop signal comes first."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    else:
        task.result()


async def start_http(args: argparse.Namespace, *components, routes: dict | None = None) -> HttpEndpoints | None:
    """The probe/metrics endpoints of the components this process runs (if --http-port),
    plus ``routes`` (path -> GET handler)."""
    if args.http_port is None:
        return None
    http = HttpEndpoints(args.host, args.http_port, registries=[c.metrics_registry for c in components],
                         readiness=[c.readiness for c in components], routes=routes)
    await http.start()
    return http


async def stop_http(http: HttpEndpoints | None) -> None:
    if http is not None:
        await http.stop()


async def run_standalone(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    broker_config, store_config = broker_settings(args, None)
    # One process, one TLS and ACL set-up: the name server speaks what the broker speaks.
    namesrv = NameServer(NamesrvConfig(
        listen_host=args.host, listen_port=args.namesrv_port, tls_mode=broker_config.tls_mode,
        tls_server_cert_path=broker_config.tls_server_cert_path, tls_server_key_path=broker_config.tls_server_key_path,
        tls_cert_reload_interval_seconds=broker_config.tls_cert_reload_interval_seconds,
        acl_enable=broker_config.acl_enable, acl_file=broker_config.acl_file))
    await namesrv.start()
    broker_config.namesrv_addr = f"{args.host}:{namesrv.port}"
    if broker_config.tls_mode == "enforcing":
        broker_config.use_tls = True
    broker = new_broker(broker_config, store_config)
    http = await start_http(args, namesrv, broker)
    try:
        await broker.start()
        await until(stop, within(broker.registered.wait(), 10))
        gc_tuning.settle()
        print(f"FerryMQ standalone is ready: name server {namesrv.address}, broker {broker.address}, "
              f"data in {broker.store_config.store_path_root_dir}", flush=True)
        if getattr(args, "demo", False):
            from ferrymq.cli.demo import run_demo
            await until(stop, run_demo(namesrv.address))
        await stop.wait()
        print("shutting down...", flush=True)
    finally:
        await stop_http(http)
        await broker.stop()
        await namesrv.stop()
    return 0


async def run_namesrv(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    namesrv = NameServer(NamesrvConfig(listen_host=args.host, listen_port=args.namesrv_port, tls_mode=args.tls_mode,
                                       tls_server_cert_path=args.tls_cert, tls_server_key_path=args.tls_key,
                                       tls_cert_reload_interval_seconds=args.tls_reload_interval,
                                       acl_enable=args.acl_file is not None, acl_file=args.acl_file or ""))
    await namesrv.start()
    gc_tuning.settle()
    book = NamesrvAddressBook(dns=args.address_service_dns)
    if book.configured:
        if args.http_port is None:
            raise SystemExit("--address-service-dns needs --http-port")
        await book.start()
    http = await start_http(args, namesrv, routes={ADDRESS_ROUTE: book.handle} if book.configured else None)
    print(f"FerryMQ name server is ready on {namesrv.address}", flush=True)
    try:
        await stop.wait()
    finally:
        await stop_http(http)
        await book.stop()
        await namesrv.stop()
    return 0


async def run_broker(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    broker = build_broker(args, args.namesrv)
    http = await start_http(args, broker)
    try:
        await broker.start()
        gc_tuning.settle()
        print(f"FerryMQ broker {broker.config.broker_name} is ready on {broker.address}", flush=True)
        await until(broker.demoted, stop.wait())  # controller mode: replaced as master, restart to rejoin
        if broker.demoted.is_set():
            print("replaced as master by the controller: stopping (a restart rejoins as a slave)", flush=True)
            return 3
    finally:
        await stop_http(http)
        await broker.stop()
    return 0


async def run_controller(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    try:
        config = ControllerConfig(listen_host=args.host, listen_port=args.port, data_dir=args.data_dir,
                                  failover_timeout=args.failover_timeout,
                                  enable_elect_unclean_master=args.elect_unclean_master, tls_mode=args.tls_mode,
                                  tls_server_cert_path=args.tls_cert, tls_server_key_path=args.tls_key,
                                  tls_cert_reload_interval_seconds=args.tls_reload_interval,
                                  advertise_addr=controller_options.advertise_addr(args))
        process = controller_options.build(args, config)
    except ValueError as e:
        raise SystemExit(f"ferrymq controller: {e}") from None
    controller = process.controller
    try:
        await controller.start()
    except ValueError as e:  # a damaged state file: never start without the epochs
        await process.close()
        raise SystemExit(f"ferrymq controller: {e}") from None
    http = await start_http(args, controller) if args.http_port is not None else None
    print(f"FerryMQ controller is ready on {controller.address} (state in {controller.store.description})",
          flush=True)
    try:
        await stop.wait()
    finally:
        await stop_http(http)
        await controller.stop()
        await process.close()
    return 0


async def run_nsaddr(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    server = NamesrvAddressServer(args.host, args.port, NamesrvAddressBook(
        static=args.namesrv, dns=args.namesrv_dns, file=args.namesrv_file, probe_interval=args.probe_interval))
    await server.start()
    print(f"FerryMQ name-server address service is ready on {server.url} (live: {';'.join(server.live) or 'none'})",
          flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("standalone", help="name server + broker in one process")
    add_server_arguments(p, namesrv=True, broker=True)
    p.add_argument("--demo", action="store_true", help="once ready, produce and consume a demo message")
    p.set_defaults(run=run_standalone)

    p = sub.add_parser("namesrv", help="run a name server")
    add_server_arguments(p, namesrv=True, broker=False)
    p.set_defaults(run=run_namesrv)

    p = sub.add_parser("nsaddr", help="serve the live name servers at /rocketmq/nsaddr (rocketmq.namesrv.domain)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080, RocketMQ's)")
    p.add_argument("--namesrv", default="", help='name servers, "host:9876;host2:9876"')
    p.add_argument("--namesrv-dns", default="", help="DNS names resolved every round, e.g. a headless Service: "
                                                     '"ns-headless.default.svc:9876"')
    p.add_argument("--namesrv-file", default=None, help="a file of name servers (one a line), re-read every round")
    p.add_argument("--probe-interval", type=float, default=5.0, help="seconds between liveness rounds (default 5)")
    p.set_defaults(run=run_nsaddr)

    p = sub.add_parser("controller", help="run the failover controller of master-slave broker groups "
                                          "(brokers with enableControllerMode)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9878, help="controller port (default 9878)")
    p.add_argument("--data-dir", default=".controller", help="where the epoch history is kept (default ./.controller)")
    p.add_argument("--failover-timeout", type=int, default=10_000, metavar="MS",
                   help="promote a slave once a master is silent this long (default 10000 ms)")
    p.add_argument("--elect-unclean-master", action="store_true",
                   help="with no slave holding all the master acknowledged, promote the best one anyway (loses "
                        "those messages)")
    add_tls_arguments(p)
    p.add_argument("--http-port", type=int, default=None, help="serve /healthz, /readyz and /metrics on this port")
    controller_options.add_arguments(p)
    p.set_defaults(run=run_controller)

    p = sub.add_parser("broker", help="run a broker that registers with name servers")
    add_server_arguments(p, namesrv=False, broker=True)
    p.add_argument("--namesrv", default=None, help='name servers, "host:9876;host2:9876" (default: namesrvAddr from config)')
    p.set_defaults(run=run_broker)
