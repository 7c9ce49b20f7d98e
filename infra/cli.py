"""The turnledger command: `turnledger --help` lists what it does.

Every command runs through `run_command`: whatever stops it (a bad setting, a
misspelled TURNLEDGER_ variable, refused input, a database that cannot be
reached) becomes one line on stderr and an exit status of the table in
infra/exit_codes.py (README, "Exit codes"), never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

import psycopg
from eventsourcing.persistence import InterfaceError as StoreInterfaceError
from eventsourcing.persistence import OperationalError as StoreOperationalError
from pydantic import ValidationError

from turnledger.domain.errors import DatabaseUnavailableError, TurnLedgerError
from turnledger.infra import (
    audit_cli,
    conversation_cli,
    demo,
    device_cli,
    export,
    purge,
    restore_cli,
    serve,
    transparency_cli,
    window_cli,
)
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.settings import (
    Settings,
    check_environment_names,
    describe_settings_error,
)

# Each command module exposes register(subparsers); its parser sets `handler`.
COMMAND_MODULES = [
    demo,
    conversation_cli,
    window_cli,
    export,
    purge,
    restore_cli,
    device_cli,
    serve,
    audit_cli,
    transparency_cli,
]

# What a database that is down, refuses us or cannot be opened raises.
UNREACHABLE = (
    psycopg.OperationalError,  # psycopg_pool.PoolTimeout included
    StoreOperationalError,
    StoreInterfaceError,
    sqlite3.OperationalError,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnledger",
        description="An event-sourced conversation store with budgeted windows.",
        epilog="Exit status: 0 done, 1 the command ran and found a problem, "
        "2 it could not run, 3 a purge is still pending (README, 'Exit codes').",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)  # usage errors exit 2, as argparse does
    return run_command(arguments.handler, arguments)


def run_command(
    handler: Callable[[argparse.Namespace], int | None],
    arguments: argparse.Namespace,
) -> int:
    """Run one command; what stops it is one line on stderr and exit status 2."""
    try:
        check_environment_names({**_dotenv(), **os.environ})
        return int(handler(arguments) or 0)
    except ValidationError as error:
        if error.title == "Settings":
            return _cannot_run(f"invalid settings: {describe_settings_error(error)}")
        return _cannot_run(f"invalid input: {describe_settings_error(error)}")
    except DatabaseUnavailableError as error:
        return _cannot_run(str(error))
    except UNREACHABLE as error:
        return _cannot_run(
            f"the database{_where()} is unavailable: {_first_line(error)}"
        )
    except (psycopg.Error, sqlite3.Error) as error:
        return _cannot_run(f"database error: {_first_line(error)}")
    except TurnLedgerError as error:
        return _cannot_run(str(error))
    except BrokenPipeError:
        # The reader stopped reading (`| head`): nothing more to say, and
        # Python's own flush at exit must not fail again on the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CANNOT_RUN
    except OSError as error:
        return _cannot_run(str(error))
    except KeyboardInterrupt:
        return _cannot_run("interrupted")


def _dotenv() -> dict[str, str | None]:
    """The `.env` file Settings reads too, so that its names are checked as well."""
    from dotenv import dotenv_values

    return dict(dotenv_values(".env")) if os.path.isfile(".env") else {}


def _cannot_run(message: str) -> int:
    print(f"turnledger: {message}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def _first_line(error: BaseException) -> str:
    # psycopg's messages run over several lines (hints, the server's detail).
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    cause = error.__cause__ or error.__context__
    if not lines and cause is not None:
        return _first_line(cause)
    return lines[0] if lines else type(error).__name__


def _where() -> str:
    """Which database the settings name, for the one line an operator reads."""
    try:
        settings = Settings()
    except ValidationError:
        return ""
    if settings.persistence == "postgres":
        return f" at {settings.postgres_host}:{settings.postgres_port}"
    if settings.persistence == "sqlite":
        return f" in {settings.data_dir}"
    return ""


def _version() -> str:
    try:
        return f"turnledger {version('turnledger')}"
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "turnledger (not installed)"


if __name__ == "__main__":
    sys.exit(main())
