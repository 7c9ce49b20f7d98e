"""A turn write whose commit landed while its connection died.

A failover can end a connection between the server's commit and the client's
hearing of it: the write is durable, the service cannot know. Here a proxy
between the service and PostgreSQL lets the write's statement through, lets
the server commit and answer, then drops the answer and both connections.
The device's PUT is answered 200, or 503 and then 200 when sent again with the
same turn id, with the receipt of the one recorded turn, never a second turn,
never a 500.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import start_server, stop_server
from tests.ha.test_failover import history
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

WRITE_FUNCTION = b"turnledger_write_batch_v"  # the turn write's one statement
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


class CommitDroppingProxy:
    """TCP proxy to PostgreSQL; once armed, the next connection that sends the
    turn write's statement gets its answer dropped after the server committed
    (ReadyForQuery in autocommit), and is closed on both sides."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            doomed = threading.Event()
            threading.Thread(
                target=self._pump_up, args=(client, server, doomed), daemon=True
            ).start()
            threading.Thread(
                target=self._pump_down, args=(server, client, doomed), daemon=True
            ).start()

    def _pump_up(
        self, client: socket.socket, server: socket.socket, doomed: threading.Event
    ) -> None:
        while data := _recv(client):
            if self.armed.is_set() and WRITE_FUNCTION in data:
                self.armed.clear()
                doomed.set()
            server.sendall(data)
        _close(client, server)

    def _pump_down(
        self, server: socket.socket, client: socket.socket, doomed: threading.Event
    ) -> None:
        held = b""
        while data := _recv(server):
            if doomed.is_set():
                held += data
                if READY_FOR_QUERY in held:  # committed and answered: drop it
                    self.dropped.set()
                    break
                continue
            client.sendall(data)
        _close(client, server)

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def test_a_write_committed_on_a_dying_connection_is_recorded_once_with_one_receipt(
    postgres_settings: Settings, tmp_path: Path
) -> None:
    proxy = CommitDroppingProxy(
        (postgres_settings.postgres_host, postgres_settings.postgres_port)
    )
    settings = postgres_settings.model_copy(update={"postgres_port": proxy.port})
    registry = open_device_registry(settings)
    token = registry.add("alice", "phone").token
    registry.close()
    server = start_server(settings, tmp_path / "server.log")
    try:
        http = httpx.Client(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        path = f"/v1/conversations/{conversation}/turns/t1"
        body = {"question": "q", "answer": "a"}
        proxy.armed.set()
        statuses = []
        for _ in range(50):
            response = http.put(path, json=body)
            statuses.append(response.status_code)
            if response.status_code == 200:
                break
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"]
        assert proxy.dropped.is_set(), "the commit's answer was never dropped"
        assert statuses[-1] == 200, statuses
        receipt = response.json()
        again = http.put(path, json=body)
        assert again.status_code == 200
        assert again.json() == receipt
        assert history(server.base_url, token, conversation) == ["t1"]
        http.close()
    finally:
        stop_server(server)
        proxy.close()
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log
    print(f"statuses for the one write: {statuses}")
