"""The FastAPI application: `create_app(settings)` and the factory uvicorn runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
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
from turnledger.infra.http.standbys import standbys
from turnledger.infra.http.sync_path import SyncReadPath
from turnledger.infra.http.turn_route import TurnWritePath
from turnledger.infra.persistence import master_key, open_conversations
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
    service = Service(
        settings=settings,
        ledger=ledger or open_conversations(settings),
        registry=registry or open_device_registry(settings),
        standbys=standbys(settings),  # reads only; always this app's to close
        cursors=CursorCodec(master_key(settings)),
    )
    app = FastAPI(
        title="turnledger",
        version=API_VERSION,
        summary="Conversations as a ledger: devices push turns and pull every change.",
        lifespan=_lifespan(
            service, owns_ledger=ledger is None, owns_registry=registry is None
        ),
    )
    app.state.service = service
    app.state.database_monitor = None
    install_error_handlers(app)
    install_outage_handlers(app, retry_after=settings.http_retry_after_seconds)
    _include_routes(app, settings)
    _add_middleware(app, settings)
    return app


def _lifespan(
    service: Service, *, owns_ledger: bool, owns_registry: bool
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the service's watchers and threads; at shutdown stop them, then
    close the stores the app opened."""
    settings, ledger = service.settings, service.ledger

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.signals.bind(asyncio.get_running_loop())
        watch = (
            _watch_postgres(service)
            if settings.persistence == "postgres"
            else _watch_by_polling(service)
        )
        monitor = DatabaseMonitor(
            watch.check,
            interval=settings.http_database_check_interval_seconds,
            timeout=watch.timeout,
            recover=watch.recover,
            on_outage=None if watch.recover is None else watch.recover.drop_broken,
        )
        monitor.start()
        app.state.database_monitor = monitor
        watch.changes.start()
        purge_retry = app.state.purge_retry = PurgeRetry(
            ledger, settings, database_available=lambda: monitor.available
        )
        purge_retry.start()  # completes compactions left pending
        stop_checkpoints = _start_checkpoints(service)
        try:
            yield
        finally:
            stop_checkpoints()
            purge_retry.stop()
            service.signals.close()
            service.close_write_threads()
            app.state.database_monitor = None
            await monitor.stop()
            if watch.postgres_check is not None:
                await watch.postgres_check.close()
            watch.changes.stop()
            service.close_standbys()
            if owns_ledger:
                ledger.close()
            if owns_registry:
                service.registry.close()

    return lifespan


@dataclass(frozen=True, slots=True)
class _DatabaseWatch:
    """How the service checks that its database answers, and hears of changes."""

    check: Callable[[], Awaitable[None]]
    timeout: float
    changes: PostgresListener | Poller
    recover: PoolsServe | None = None
    postgres_check: PostgresCheck | None = None


def _watch_postgres(service: Service) -> _DatabaseWatch:
    """Check with a connection of its own; hear changes by LISTEN."""
    settings, ledger, registry = service.settings, service.ledger, service.registry
    check = PostgresCheck(settings.postgres_conninfo())
    # After an outage: ready only once the pools requests use serve.
    recover = PoolsServe(
        service_pools(ledger, registry),
        timeout=settings.http_database_timeout_seconds / 2,
    )
    listener = PostgresListener(
        service.signals,
        settings.postgres_conninfo(),
        events_channel=ledger.recorder.channel_name,  # type: ignore[attr-defined]
        devices_channel=registry.revocation_channel,
        on_commits=service.reads.note_primary_position,
    )
    return _DatabaseWatch(
        check=check,
        timeout=settings.http_database_timeout_seconds,
        changes=listener,
        recover=recover,
        postgres_check=check,
    )


def _watch_by_polling(service: Service) -> _DatabaseWatch:
    """Check by reading the log's head; hear changes by polling it."""
    settings = service.settings

    async def check() -> None:
        await run_in_threadpool(service.feed.head_position)

    return _DatabaseWatch(
        check=check,
        # SQLite: a read may wait for another process's write transaction
        # (up to the store's 30 s lock timeout) without anything being down.
        timeout=max(settings.http_database_timeout_seconds, SQLITE_LOCK_SECONDS),
        changes=Poller(
            service.signals,
            LogFollower(service.ledger, service.feed),
            service.registry,
            interval=settings.sync_poll_interval_seconds,
        ),
    )


def _start_checkpoints(service: Service) -> Callable[[], None]:
    """Sign transparency-log checkpoints, by default once a key is set; return
    what stops it."""
    stop = threading.Event()
    thread = threading.Thread(
        target=checkpoint_periodically,
        args=(service.ledger, service.settings, stop),
        name="turnledger-checkpoints",
        daemon=True,
    )
    if service.settings.checkpoint_dir_in_effect is not None:
        thread.start()

    def stop_checkpoints() -> None:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=5)

    return stop_checkpoints


def _include_routes(app: FastAPI, settings: Settings) -> None:
    """The API's routers, then the service's own health and readiness."""
    for routes in (
        conversation_routes,
        sync_routes,
        device_routes,
        export_routes,
        fold_routes,
        purge_routes,
        audit_routes,
        receipt_routes,
        web_routes,
    ):
        app.include_router(routes.router)

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


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Each added outside the one before: the last added sees a request first."""
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


def app_from_environment() -> FastAPI:
    """The factory `turnledger serve` hands to uvicorn: settings from TURNLEDGER_*."""
    disable_core_dumps()  # a worker started by exec is dumpable again
    return create_app(Settings())
