"""After a database outage the service serves again within a second.

The database is a private cluster this test stops (immediate) for long enough
that psycopg_pool's reconnection back-off would have grown to several seconds,
while clients keep writing, syncing and asking for readiness. Once it is back:
the first write is acknowledged within 1 s, `/v1/ready` says 200 within 1 s,
and every request sent after readiness said 200 is served (never a 503, never
a wait past 1 s): readiness waits for the service's own pools, not for a
connection of its own. The purge retry stays out of the pools while the
database is down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.cluster import PrivateCluster, private_cluster
from tests.e2e.conftest import Server, client, start_server, stop_server
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

pytestmark = pytest.mark.postgres

OUTAGE_SECONDS = 9.0  # the pools' back-off would be at 8 s by then
SERVED_WITHIN_SECONDS = 1.0
WATCH_SECONDS = 4.0


@dataclass(frozen=True)
class Answer:
    what: str
    sent: float
    answered: float
    status: int


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster() as running:
        yield running


def test_the_first_request_after_an_outage_is_served_within_a_second(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_port=cluster.port,
        postgres_schema="recovery",
        master_key=new_master_key(),
    )
    registry = open_device_registry(settings)
    token = registry.add("alice", "phone").token
    registry.close()
    server = start_server(settings, tmp_path / "server.log")
    try:
        restarted_at, answers = _outage_and_return(cluster, server, token)
    finally:
        stop_server(server)
    after = [a for a in answers if a.sent >= restarted_at]
    writes = [a for a in after if a.what == "put"]
    served = [a for a in writes if a.status == 200]
    assert served, answers[-10:]
    first_write = min(a.answered for a in served) - restarted_at
    readies = [a for a in after if a.what == "ready" and a.status == 200]
    assert readies, answers[-10:]
    ready_at = min(a.answered for a in readies)
    print(
        f"ready {ready_at - restarted_at:.3f} s and first write acknowledged "
        f"{first_write:.3f} s after the database accepted connections"
    )
    assert first_write < SERVED_WITHIN_SECONDS, first_write
    assert ready_at - restarted_at < SERVED_WITHIN_SECONDS
    # Once readiness said 200, everything sent is served, promptly.
    late = [a for a in answers if a.sent >= ready_at and a.what != "ready"]
    assert late, answers[-10:]
    assert {a.status for a in late} == {200}, [a for a in late if a.status != 200]
    slowest = max(a.answered - a.sent for a in late)
    assert slowest < SERVED_WITHIN_SECONDS, slowest
    assert {a.status for a in answers} <= {200, 503}, {a.status for a in answers}
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log
    assert "purge retry failed" not in log, log


def _outage_and_return(
    cluster: PrivateCluster, server: Server, token: str
) -> tuple[float, list[Answer]]:
    """Clients keep asking through an outage and after it; every answer."""
    answers: list[Answer] = []
    http = client(server, token)
    conversation = http.post("/v1/conversations").json()["conversation_id"]
    stop = threading.Event()

    def ask(what: str, send: httpx.Client, request: httpx.Request) -> None:
        sent = time.monotonic()
        try:
            status = send.send(request).status_code
        except httpx.TransportError:
            status = 0
        answers.append(Answer(what, sent, time.monotonic(), status))

    def writer() -> None:
        with client(server, token) as own:
            n = 0
            while not stop.is_set():
                n += 1
                path = f"/v1/conversations/{conversation}/turns/t{n}"
                body = {"question": f"q{n}", "answer": f"a{n}"}
                ask("put", own, own.build_request("PUT", path, json=body))
                time.sleep(0.05)

    def reader() -> None:
        with client(server, token) as own:
            while not stop.is_set():
                ask("sync", own, own.build_request("GET", "/v1/sync"))
                ask("ready", own, own.build_request("GET", "/v1/ready"))
                time.sleep(0.03)

    threads = [threading.Thread(target=f) for f in (writer, reader, reader)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        cluster.stop("immediate")
        time.sleep(OUTAGE_SECONDS)
        cluster.start()
        restarted_at = time.monotonic()
        time.sleep(WATCH_SECONDS)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        http.close()
    return restarted_at, sorted(answers, key=lambda a: a.sent)
