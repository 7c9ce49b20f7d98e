"""The real service: `turnledger serve` in a subprocess on a loopback port,
against PostgreSQL (a fresh schema per test), driven by a real HTTP client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture
def service_settings(postgres_settings: Settings) -> Settings:
    return postgres_settings.model_copy(update={"postgres_pool_size": 10})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def settings_env(settings: Settings) -> dict[str, str]:
    """The TURNLEDGER_* environment that makes `serve` open these settings.

    Every setting is passed, so a child process runs with exactly these.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    for name, value in settings:
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[f"TURNLEDGER_{name.upper()}"] = str(value)
    return env


def start_server(settings: Settings, log: Path, *, port: int | None = None) -> Server:
    port = port or free_port()
    handle = log.open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnledger.infra.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=settings_env(settings),
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/v1/health", timeout=1).status_code == 200:
                return Server(base_url, process, log)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not answer in 30 s:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture
def launch(
    service_settings: Settings, tmp_path: Path
) -> Iterator[Callable[[], Server]]:
    """Starts service processes on the test's schema; stops them afterwards."""
    servers: list[Server] = []

    def _launch() -> Server:
        server = start_server(service_settings, tmp_path / f"server-{len(servers)}.log")
        servers.append(server)
        return server

    yield _launch
    for server in servers:
        stop_server(server)
    for server in servers:
        log = server.log.read_text(errors="replace")
        assert "Traceback" not in log, log


@pytest.fixture
def server(launch: Callable[[], Server]) -> Server:
    return launch()


@pytest.fixture
def add_device(service_settings: Settings) -> Iterator[Callable[[str, str], str]]:
    """Adds a device for a user the way `turnledger device add` does; the token."""
    registry = open_device_registry(service_settings)

    def _add(user_id: str, name: str) -> str:
        return registry.add(user_id, name).token

    yield _add
    registry.close()


def client(server: Server, token: str, **kwargs: object) -> httpx.Client:
    kwargs.setdefault("timeout", 30)
    return httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {token}"},
        **kwargs,  # type: ignore[arg-type]
    )


def close_stores(app: FastAPI) -> None:
    """Close what `create_app` opened, for an app used without its lifespan
    (which would close them at shutdown)."""
    service = app.state.service
    service.ledger.close()
    service.registry.close()
    service.close_standbys()
