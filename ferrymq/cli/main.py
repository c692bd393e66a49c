"""The ``ferrymq`` command."""

from __future__ import annotations

import argparse
import sys

from ferrymq import __version__
from ferrymq.cli import client_commands, cluster_commands, console_command, group_commands, message_commands, servers
from ferrymq.cli.logging_setup import configure_logging
from ferrymq.cli.output import fail
from ferrymq.client.errors import MQClientError
from ferrymq.common import event_loop
from ferrymq.common.config_loader import ConfigError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ferrymq", description="FerryMQ: a RocketMQ-compatible message broker")
    parser.add_argument("--version", action="version", version=f"ferrymq {__version__}")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="log level (default warning)")
    parser.add_argument("--log-format", default="text", choices=["text", "json"], help="log line format")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    servers.register(sub)
    client_commands.register(sub)
    console_command.register(sub)
    # `ferrymq admin AREA ACTION`: each area module adds its own subcommands here.
    admin = sub.add_parser("admin", help="manage topics, groups, brokers and the cluster")
    admin_areas = admin.add_subparsers(dest="area", required=True, parser_class=_Parser)
    for area in (client_commands, cluster_commands, message_commands, group_commands):
        area.register_admin(admin_areas)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        return event_loop.run(args.run(args))
    except KeyboardInterrupt:
        return 130
    except (MQClientError, ConfigError, OSError) as e:
        return fail(str(e))


if __name__ == "__main__":
    sys.exit(main())
