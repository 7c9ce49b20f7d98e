"""A real `turnledger serve` for the device side (TypeScript client, web page),
on SQLite and on PostgreSQL, signing a checkpoint every half second; devices
added the way `turnledger device add` does; headless Debian chromium driven
by Playwright.

Locally these tests skip with a hint when node, chromium or playwright is
missing (scripts/install-browser installs them); under CI=true they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key

ROOT = Path(__file__).resolve().parents[2]
TS_ROOT = ROOT / "clients" / "typescript"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(
    os.environ.get("TURNLEDGER_TEST_SCREENSHOT_DIR", ROOT / "build" / "screenshots")
)


def missing(what: str) -> None:
    message = f"{what} is missing: run scripts/install-browser"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Service:
    server: Server
    settings: Settings
    store: str
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.base_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    """The service on one store, with devices a and b of one user and one of
    another user."""
    checkpoints = {
        "audit_signing_key": new_signing_key(),
        "audit_checkpoint_dir": tmp_path / "checkpoints",
        "audit_checkpoint_interval_seconds": 0.5,
    }
    if request.param == "postgres":
        base: Settings = request.getfixturevalue("postgres_settings")
        settings = base.model_copy(update=checkpoints)
    else:
        settings = Settings(
            _env_file=None,
            persistence="sqlite",
            data_dir=tmp_path / "data",
            **checkpoints,
        )
    registry = open_device_registry(settings)
    try:
        tokens = {
            "a": registry.add("alice", "laptop").token,
            "b": registry.add("alice", "phone").token,
            "other": registry.add("mallory", "laptop").token,
        }
    finally:
        registry.close()
    server = start_server(settings, tmp_path / "server.log")
    try:
        yield Service(server, settings, request.param, tokens)
    finally:
        stop_server(server)
        log = server.log.read_text(errors="replace")
        assert "Traceback" not in log, log


@pytest.fixture(scope="session")
def node() -> str:
    found = shutil.which("node")
    if found is None or not (TS_ROOT / "node_modules").is_dir():
        missing("node or clients/typescript/node_modules")
    assert found is not None
    return found


# Package scope, not session: Playwright's sync API keeps an event loop running
# in the main thread until it stops, and every later test that calls
# asyncio.run (the async client, the adapters) would fail behind it.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package")
    if not Path(CHROMIUM).exists():
        missing(CHROMIUM)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()
