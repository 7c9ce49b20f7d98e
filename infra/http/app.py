"""The FastAPI application: `create_app(settings)` and the factory uvicorn runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from turnledger.infra.checkpoint import checkpoint_periodically
from turnledger.infra.devices import DeviceRegistry, open_device_registry
from turnledger.infra.http import (
    audit_routes,
    conversation_routes,
    device_routes,
    export_routes,
    fold_routes,
    purge_routes,
    receipt_routes,
    sync_routes,
    web_routes,
)
from turnledger.infra.http.cursor import CursorCodec
from turnledger.infra.http.database import (
    DatabaseGuard,
    DatabaseMonitor,
    PoolsServe,
    PostgresCheck,
    install_outage_handlers,
    service_pools,
)
from turnledger.infra.http.errors import install_error_handlers
from turnledger.infra.http.limits import BodySizeLimit, HeadSizeLimit
from turnledger.infra.http.notifier import LogFollower, Poller, PostgresListener
from turnledger.infra.http.service import Service
from turnledger.infra.http.sync_path import SyncReadPath
from turnledger.infra.http.turn_route import TurnWritePath
from turnledger.infra.persistence import master_key, open_conversations, open_replica
from turnledger.infra.process_hardening import disable_core_dumps
from turnledger.infra.purge_retry import PurgeRetry
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.wire.status import HealthOut, ReadyOut

API_VERSION = "1"
SQLITE_LOCK_SECONDS = 30.0

# Routes that never touch the database: answered even while it is down.
UNGUARDED_PATHS = frozenset(
    {
        "/v1/health",
        "/v1/ready",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
    }
)


def create_app(
    settings: Settings,
    *,
    ledger: Conversations | None = None,
    registry: DeviceRegistry | None = None,
) -> FastAPI:
    """The service over `ledger` and `registry`, opened from settings if not given.

    What this function opens, the app closes at shutdown; what it is given, the
    caller closes.
    """
    owned_ledger = ledger is None
    owned_registry = registry is None
    ledger = ledger or open_conversations(settings)
    registry = registry or open_device_registry(settings)
    replica = open_replica(settings)  # reads only; always this app's to close
    service = Service(
        settings=settings,
        ledger=ledger,
        registry=registry,
        cursors=CursorCodec(master_key(settings)),
        replica=replica,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.signals.bind(asyncio.get_running_loop())
        check: Callable[[], Awaitable[None]]
        recover: PoolsServe | None = None
        watcher: PostgresListener | Poller
        if settings.persistence == "postgres":
            check = postgres_check = PostgresCheck(settings.postgres_conninfo())
            # After an outage: ready only once the pools requests use serve.
            recover = PoolsServe(
                service_pools(ledger, registry),
                timeout=settings.http_database_timeout_seconds / 2,
            )
            watcher = PostgresListener(
                service.signals,
                settings.postgres_conninfo(),
                events_channel=ledger.recorder.channel_name,  # type: ignore[attr-defined]
                devices_channel=registry.revocation_channel,
                on_commits=service.reads.note_primary_position,
            )
        else:
            postgres_check = None

            async def check() -> None:
                await run_in_threadpool(service.feed.head_position)

            watcher = Poller(
                service.signals,
                LogFollower(ledger, service.feed),
                registry,
                interval=settings.sync_poll_interval_seconds,
            )
        monitor = DatabaseMonitor(
            check,
            interval=settings.http_database_check_interval_seconds,
            # SQLite: a read may wait for another process's write transaction
            # (up to the store's 30 s lock timeout) without anything being down.
            timeout=settings.http_database_timeout_seconds
            if settings.persistence == "postgres"
            else max(settings.http_database_timeout_seconds, SQLITE_LOCK_SECONDS),
            recover=recover,
            on_outage=None if recover is None else recover.drop_broken,
        )
        monitor.start()
        app.state.database_monitor = monitor
        watcher.start()
        purge_retry = app.state.purge_retry = PurgeRetry(
            ledger, settings, database_available=lambda: monitor.available
        )
        purge_retry.start()  # completes compactions left pending
        # Signed transparency-log checkpoints, by default once a key is set.
        checkpoints_stop = threading.Event()
        checkpoints = threading.Thread(
            target=checkpoint_periodically,
            args=(ledger, settings, checkpoints_stop),
            name="turnledger-checkpoints",
            daemon=True,
        )
        if settings.checkpoint_dir_in_effect is not None:
            checkpoints.start()
        try:
            yield
        finally:
            checkpoints_stop.set()
            if checkpoints.is_alive():
                checkpoints.join(timeout=5)
            purge_retry.stop()
            service.signals.close()
            service.close_write_threads()
            app.state.database_monitor = None
            await monitor.stop()
            if postgres_check is not None:
                await postgres_check.close()
            watcher.stop()
            if replica is not None:
                replica.close()
            if owned_ledger:
                ledger.close()
            if owned_registry:
                registry.close()

    app = FastAPI(
        title="turnledger",
        version=API_VERSION,
        summary="Conversations as a ledger: devices push turns and pull every change.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.database_monitor = None
    install_error_handlers(app)
    install_outage_handlers(app, retry_after=settings.http_retry_after_seconds)
    app.include_router(conversation_routes.router)
    app.include_router(sync_routes.router)
    app.include_router(device_routes.router)
    app.include_router(export_routes.router)
    app.include_router(fold_routes.router)
    app.include_router(purge_routes.router)
    app.include_router(audit_routes.router)
    app.include_router(receipt_routes.router)
    app.include_router(web_routes.router)

    @app.get("/v1/health", response_model=HealthOut, tags=["service"])
    async def health() -> HealthOut:
        """Liveness: the process answers. Says nothing about the database.

        `async`, so it is answered even when every worker thread is busy."""
        return HealthOut(status="ok")

    @app.get(
        "/v1/ready",
        response_model=ReadyOut,
        tags=["service"],
        responses={503: {"model": ReadyOut, "description": "the database is down"}},
    )
    async def ready() -> JSONResponse:
        """Readiness: 200 while the database answers the service's checks, 503
        (with Retry-After) while it does not."""
        monitor: DatabaseMonitor | None = app.state.database_monitor
        state = monitor.state if monitor is not None else None
        available = state is None or state.available
        body = ReadyOut(
            status="ready" if available else "unavailable",
            database="available" if available else "unavailable",
            database_since=datetime.fromtimestamp(
                state.since if state else time.time(), UTC
            ),
            reason=state.reason if state else None,
        )
        return JSONResponse(
            body.model_dump(mode="json"),
            status_code=200 if available else 503,
            headers=None
            if available
            else {"Retry-After": str(settings.http_retry_after_seconds)},
        )

    # Added first, so they run innermost: inside every limit and the outage
    # guard, ahead of FastAPI's routing, for turn writes and sync reads that
    # need none of it.
    app.add_middleware(TurnWritePath)
    app.add_middleware(SyncReadPath)
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.http_max_body_bytes,
        timeout=settings.http_body_timeout_seconds,
    )
    app.add_middleware(
        DatabaseGuard,
        monitor=lambda: app.state.database_monitor,
        unguarded=UNGUARDED_PATHS,
        retry_after=settings.http_retry_after_seconds,
        write_deadline=settings.http_write_deadline_seconds,
    )
    app.add_middleware(
        HeadSizeLimit,
        max_line=settings.http_max_request_line_bytes,
        max_head=settings.http_max_header_bytes,
    )
    return app


def app_from_environment() -> FastAPI:
    """The factory `turnledger serve` hands to uvicorn: settings from TURNLEDGER_*."""
    disable_core_dumps()  # a worker started by exec is dumpable again
    return create_app(Settings())
