"""The FastAPI application: `create_app(settings)` and the factory uvicorn runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel

from turnledger.domain.application import Conversations
from turnledger.infra.devices import DeviceRegistry, open_device_registry
from turnledger.infra.http import (
    conversation_routes,
    device_routes,
    export_routes,
    fold_routes,
    purge_routes,
    sync_routes,
)
from turnledger.infra.http.cursor import CursorCodec
from turnledger.infra.http.errors import install_error_handlers
from turnledger.infra.http.limits import BodySizeLimit
from turnledger.infra.http.notifier import HeadPoller, PostgresListener
from turnledger.infra.http.service import Service
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.purge_retry import PurgeRetry
from turnledger.infra.settings import Settings

API_VERSION = "1"


class HealthOut(BaseModel):
    status: str


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
    service = Service(
        settings=settings,
        ledger=ledger,
        registry=registry,
        cursors=CursorCodec(master_key(settings)),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.signal.bind(asyncio.get_running_loop())
        if settings.persistence == "postgres":
            watcher: PostgresListener | HeadPoller = PostgresListener(
                service.signal,
                settings.postgres_conninfo(),
                channel=ledger.recorder.channel_name,  # type: ignore[attr-defined]
            )
        else:
            watcher = HeadPoller(
                service.signal,
                service.feed.head_position,
                interval=settings.sync_poll_interval_seconds,
            )
        watcher.start()
        purge_retry = app.state.purge_retry = PurgeRetry(ledger, settings)
        purge_retry.start()  # completes compactions left pending
        try:
            yield
        finally:
            purge_retry.stop()
            watcher.stop()
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
    install_error_handlers(app)
    app.include_router(conversation_routes.router)
    app.include_router(sync_routes.router)
    app.include_router(device_routes.router)
    app.include_router(export_routes.router)
    app.include_router(fold_routes.router)
    app.include_router(purge_routes.router)

    @app.get("/v1/health", response_model=HealthOut, tags=["service"])
    def health() -> HealthOut:
        return HealthOut(status="ok")

    app.add_middleware(BodySizeLimit, max_bytes=settings.http_max_body_bytes)
    return app


def app_from_environment() -> FastAPI:
    """The factory `turnledger serve` hands to uvicorn: settings from TURNLEDGER_*."""
    return create_app(Settings())
