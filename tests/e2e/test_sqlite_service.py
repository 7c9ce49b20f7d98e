"""The service on the embedded SQLite default: no server, same protocol."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.e2e.conftest import client, start_server, stop_server
from tests.e2e.replica import Replica, pull
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings


def test_devices_sync_and_long_poll_on_sqlite(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    registry = open_device_registry(settings)
    phone_token = registry.add("alice", "phone").token
    laptop_token = registry.add("alice", "laptop").token
    registry.close()
    server = start_server(settings, tmp_path / "server.log")
    try:
        phone, laptop = client(server, phone_token), client(server, laptop_token)
        conversation = phone.post("/v1/conversations").json()["conversation_id"]
        _, cursor = pull(laptop)

        def write_later() -> None:
            time.sleep(0.3)
            phone.put(
                f"/v1/conversations/{conversation}/turns/t1",
                json={"question": "Über?", "answer": "Ja 👍"},
            )

        writer = threading.Thread(target=write_later)
        began = time.monotonic()
        writer.start()
        polled = laptop.get("/v1/sync", params={"since": cursor, "timeout": 10})
        writer.join()
        assert time.monotonic() - began < 5
        assert [c["turn_id"] for c in polled.json()["changes"]] == ["t1"]

        phone_copy, laptop_copy = Replica(), Replica()
        phone_copy.sync(phone)
        laptop_copy.sync(laptop)
        assert (
            phone_copy.turns
            == laptop_copy.turns
            == {conversation: {"t1": ("Über?", "Ja 👍")}}
        )
    finally:
        stop_server(server)
    assert (tmp_path / "data" / "events.sqlite3").is_file()
