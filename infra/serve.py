"""`turnledger serve`: the HTTP service on uvicorn, configured by TURNLEDGER_*."""

from __future__ import annotations

import argparse
import math
from typing import Any

from turnledger.domain.errors import DatabaseUnavailableError, InvalidInputError
from turnledger.infra.arguments import port_number, positive_int
from turnledger.infra.process_hardening import disable_core_dumps
from turnledger.infra.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the HTTP sync service (OpenAPI document at /openapi.json)"
    )
    parser.add_argument("--host", help="address to bind (default TURNLEDGER_HTTP_HOST)")
    parser.add_argument(
        "--port",
        type=port_number,
        help="port to bind, 1 to 65535 (default TURNLEDGER_HTTP_PORT)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="service processes; they share the store and wake each other's "
        "long-polls (PostgreSQL LISTEN/NOTIFY, or polling on SQLite)",
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    import uvicorn

    settings = Settings()  # checked here, once, before any worker starts
    disable_core_dumps()  # opened texts never reach a core file (workers too)
    if arguments.workers < 1:
        raise InvalidInputError("--workers", "must be at least 1")
    if settings.persistence == "memory" and arguments.workers > 1:
        # Each process would hold its own store: devices would see different data.
        raise InvalidInputError(
            "--workers", "the memory store lives in one process: use 1, or SQLite"
        )
    if settings.persistence == "postgres":
        _check_database(settings)
    if settings.persistence != "memory":
        _open_once(settings)
    uvicorn.run(
        "turnledger.infra.http.app:app_from_environment",
        factory=True,
        host=arguments.host or settings.http_host,
        port=settings.http_port if arguments.port is None else arguments.port,
        workers=arguments.workers,
        log_level="info",
        access_log=settings.http_access_log,
        # httptools (C) with the request head bounded in bytes and time
        # (infra/http/protocol.py): uvicorn's own puts no limit on either.
        http="turnledger.infra.http.protocol:LimitedHttpToolsProtocol",
        # Long-polls answer at once when the server stops; this bounds the wait
        # for other requests in flight.
        timeout_graceful_shutdown=math.ceil(settings.http_shutdown_timeout_seconds),
    )
    return 0


def _open_once(settings: Settings) -> None:
    """Open the store before any worker starts: a wrong master key or a lost
    deletion record is refused here in one line, and deletions a restored
    backup predates are redone before any request can be served."""
    from turnledger.infra.persistence import open_conversations

    open_conversations(settings).close()


def _check_database(settings: Settings) -> None:
    """Refuse to start, with a one-line reason, when the database is unreachable."""
    import psycopg

    try:
        psycopg.connect(settings.postgres_conninfo()).close()
    except psycopg.Error as error:
        reason = str(error).strip().splitlines()
        where = f"{settings.postgres_host}:{settings.postgres_port}"
        raise DatabaseUnavailableError(
            f"{where}: {reason[0] if reason else 'cannot connect'}"
        ) from None
