"""The turnledger command: `turnledger --help` lists what it does."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from turnledger.domain.errors import TurnLedgerError
from turnledger.infra import (
    audit_cli,
    demo,
    device_cli,
    export,
    purge,
    restore_cli,
    serve,
    transparency_cli,
    window_cli,
)

# Each command module exposes register(subparsers); its parser sets `handler`.
COMMAND_MODULES = [
    demo,
    window_cli,
    export,
    purge,
    restore_cli,
    device_cli,
    serve,
    audit_cli,
    transparency_cli,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnledger",
        description="An event-sourced conversation store with budgeted windows.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        return int(arguments.handler(arguments) or 0)
    except ValidationError as error:
        print(f"turnledger: invalid settings:\n{error}", file=sys.stderr)
        return 2
    except TurnLedgerError as error:
        print(f"turnledger: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
