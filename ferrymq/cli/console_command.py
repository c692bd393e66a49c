"""``ferrymq console``: the options, and running the console until SIGTERM/SIGINT;
``ferrymq console hash-password``: a password hash (or a whole account) for the accounts file."""

from __future__ import annotations

import argparse
import getpass
import sys

import yaml

from ferrymq.cli.client_commands import client_config
from ferrymq.cli.servers import stop_on_signals
from ferrymq.client.config import default_namesrv
from ferrymq.common.config_loader import ConfigError
from ferrymq.console.accounts import ROLES, AccountsError, hash_password
from ferrymq.console.settings import ClusterSpec, ConsoleSettings, SettingsError, is_loopback, parse_cluster


def _cluster(text: str) -> ClusterSpec:
    try:
        return parse_cluster(text)
    except SettingsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("console", help="the web console: overview, topics, consumer groups, messages",
                       description="Serve the FerryMQ console (pages and a JSON API under /api/).")
    p.add_argument("--cluster", dest="clusters", action="append", type=_cluster, default=[],
                   metavar="NAME=HOST:PORT[;HOST:PORT]",
                   help="a cluster to show, by its name servers (repeatable; default: default=$NAMESRV_ADDR "
                        "or 127.0.0.1:9876)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8088, help="HTTP port (default 8088; 0 = any free port)")
    p.add_argument("--read-only", action=argparse.BooleanOptionalAction, default=None,
                   help="refuse write actions (default: writes allowed when listening on a loopback address only, "
                        "read-only otherwise)")
    p.add_argument("--sample-seconds", type=float, default=10.0, help="how often the overview reads every broker (default 10)")
    p.add_argument("--history-minutes", type=float, default=15.0, help="rate history kept for the overview (default 15)")
    p.add_argument("--max-export", type=int, default=100_000, help="most messages one export holds (default 100000)")
    p.add_argument("--access-key", default=None,
                   help="ACL account for every cluster (default $FERRYMQ_ACCESS_KEY); its secret from $FERRYMQ_SECRET_KEY")
    p.add_argument("--tls", action="store_true", help="TLS to every server (default: $FERRYMQ_TLS)")
    p.add_argument("--tls-ca-file", default=None, help="verify servers against this CA (default $FERRYMQ_TLS_CA_FILE)")
    p.add_argument("--tls-insecure", action="store_true", help="accept any server certificate (test certificates)")
    p.add_argument("--accounts", metavar="FILE", default=None,
                   help="sign-in with the accounts of this YAML file (name, passwordHash, role, viewBodies; "
                        "read again when it changes); without it the console is open to whoever reaches it")
    p.add_argument("--audit-log", metavar="FILE", default=None,
                   help="append the audit lines (write actions, sign-ins) to this file too (they are always logged)")
    p.add_argument("--session-idle-minutes", type=float, default=60.0,
                   help="a session ends after this long without a request (default 60)")
    p.add_argument("--session-hours", type=float, default=12.0, help="a session ends this long after sign-in (default 12)")
    p.add_argument("--trace-url", metavar="URL", default=None,
                   help="a trace viewer's URL holding {traceId} (Jaeger, Tempo, ...): a message's OpenTelemetry trace id "
                        "links there")
    p.add_argument("--https-cert", metavar="FILE", default=None,
                   help="serve HTTPS with this certificate (PEM chain) and --https-key; a renewed pair is served to "
                        "new connections without a restart")
    p.add_argument("--https-key", metavar="FILE", default=None, help="the HTTPS certificate's private key (PEM)")
    p.add_argument("--https-reload-seconds", type=float, default=30.0,
                   help="how often to look for a renewed certificate (default 30)")
    p.add_argument("--secure-cookies", action="store_true",
                   help="send the session cookie over HTTPS only (the console behind a TLS Ingress)")
    p.set_defaults(run=run_console)
    tools = p.add_subparsers(dest="console_tool", required=False, metavar="{hash-password}")
    h = tools.add_parser("hash-password", help="a password hash for the accounts file (the password from stdin, "
                                               "or asked for twice on a terminal)")
    h.add_argument("--name", help="print a whole account entry (YAML) for this name")
    h.add_argument("--role", choices=ROLES, default="viewer", help="the entry's role (default viewer)")
    h.add_argument("--view-bodies", action="store_true", help="the entry may read message bodies")
    h.set_defaults(run=run_hash_password)


def settings_from(args: argparse.Namespace) -> ConsoleSettings:
    clusters = args.clusters or [parse_cluster(f"default={default_namesrv() or '127.0.0.1:9876'}")]
    configs = {}
    for spec in clusters:
        # The CLI's rules for credentials and TLS: flags first, then the environment.
        configs[spec.name] = client_config(argparse.Namespace(
            namesrv=spec.namesrv_addr, access_key=args.access_key, tls=args.tls, tls_ca_file=args.tls_ca_file,
            tls_insecure=args.tls_insecure))
    read_only = args.read_only if args.read_only is not None else not is_loopback(args.host)
    return ConsoleSettings(clusters, configs, host=args.host, port=args.port, read_only=read_only,
                           sample_seconds=args.sample_seconds, history_minutes=args.history_minutes,
                           max_export=args.max_export, accounts_file=args.accounts, audit_log=args.audit_log,
                           session_idle_minutes=args.session_idle_minutes, session_hours=args.session_hours,
                           secure_cookies=args.secure_cookies, trace_url=args.trace_url,
                           https_cert=args.https_cert, https_key=args.https_key,
                           https_reload_seconds=args.https_reload_seconds)


async def run_console(args: argparse.Namespace) -> int:
    from ferrymq.console.server import ConsoleServer

    stop = stop_on_signals()
    try:
        settings = settings_from(args)
        server = ConsoleServer(settings)
    except (SettingsError, AccountsError, ConfigError, OSError) as e:
        raise SystemExit(f"ferrymq console: error: {e}") from None
    await server.start()
    mode = ("read-only" if settings.read_only else "read-write") + (", sign-in on" if server.access.enabled else "")
    print(f"FerryMQ console is ready on {server.url} ({mode}; clusters: "
          f"{', '.join(c.name for c in settings.clusters)})", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
    return 0



async def run_hash_password(args: argparse.Namespace) -> int:
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise SystemExit("ferrymq console hash-password: error: the two passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    try:
        hashed = hash_password(password)
    except AccountsError as e:
        raise SystemExit(f"ferrymq console hash-password: error: {e}") from None
    if args.name:
        entry = {"name": args.name, "passwordHash": hashed, "role": args.role, "viewBodies": args.view_bodies}
        print(yaml.safe_dump([entry], sort_keys=False), end="")
    else:
        print(hashed)
    return 0
