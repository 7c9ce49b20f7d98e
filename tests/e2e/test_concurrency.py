"""Eight devices of one user confirm 200 turns each into one conversation at
once, every request sent twice concurrently (an injected retry)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.e2e.conftest import Server, client
from tests.e2e.replica import pull
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

DEVICES = 8
TURNS_PER_DEVICE = 200


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "two-processes"])
def test_eight_devices_racing_with_retries_lose_nothing_and_duplicate_nothing(
    launch: Callable[[], Server], add_device: Callable[[str, str], str], processes: int
) -> None:
    """With two service processes, the two copies of each request go to
    different processes, so they race in the database itself and the ledger's
    reload-and-retry on a lost race is what keeps the result exact."""
    servers = [launch() for _ in range(processes)]
    tokens = [add_device("alice", f"device-{n}") for n in range(DEVICES)]
    devices = [client(servers[n % processes], tokens[n]) for n in range(DEVICES)]
    retries = [client(servers[(n + 1) % processes], tokens[n]) for n in range(DEVICES)]
    conversation = devices[0].post("/v1/conversations").json()["conversation_id"]

    def push_all(index: int) -> list[tuple[str, int]]:
        receipts: list[tuple[str, int]] = []
        with ThreadPoolExecutor(max_workers=2) as retry:
            for n in range(TURNS_PER_DEVICE):
                turn_id = f"d{index}-t{n}"
                body = {
                    "question": f"question {n} from device {index}",
                    "answer": f"answer {n} to device {index}",
                }

                def send(
                    http: httpx.Client,
                    turn_id: str = turn_id,
                    body: dict[str, str] = body,
                ) -> httpx.Response:
                    return http.put(
                        f"/v1/conversations/{conversation}/turns/{turn_id}", json=body
                    )

                original, retried = (
                    f.result()
                    for f in [
                        retry.submit(send, devices[index]),
                        retry.submit(send, retries[index]),
                    ]
                )
                assert original.status_code == 200, original.text
                assert retried.status_code == 200, retried.text
                # The retry is answered with the very same receipt.
                assert original.json() == retried.json()
                receipts.append((turn_id, original.json()["version"]))
        return receipts

    with ThreadPoolExecutor(max_workers=DEVICES) as pool:
        receipts = [r for rs in pool.map(push_all, range(DEVICES)) for r in rs]

    expected = {f"d{i}-t{n}" for i in range(DEVICES) for n in range(TURNS_PER_DEVICE)}
    total = DEVICES * TURNS_PER_DEVICE
    assert len(receipts) == total
    assert sorted(version for _, version in receipts) == list(range(2, total + 2))

    state = devices[0].get(f"/v1/conversations/{conversation}").json()
    assert state["total_turns"] == total and state["version"] == total + 1

    streams = []
    for http in devices:
        changes, _ = pull(http)
        streams.append(changes)
    assert all(stream == streams[0] for stream in streams[1:])
    stream = streams[0]
    assert [c["version"] for c in stream] == list(range(1, total + 2))
    turn_ids = [c["turn_id"] for c in stream if c["kind"] == "turn_recorded"]
    assert len(turn_ids) == total and set(turn_ids) == expected
    # Each device's own turns arrive in the order it confirmed them.
    for index in range(DEVICES):
        own = [t for t in turn_ids if t.startswith(f"d{index}-")]
        assert own == [f"d{index}-t{n}" for n in range(TURNS_PER_DEVICE)]
    # And the receipts agree with the stream about where each turn landed.
    assert dict(receipts) == {
        c["turn_id"]: c["version"] for c in stream if c["kind"] == "turn_recorded"
    }

    pages, offset = [], 0
    while offset is not None:
        page = (
            devices[1]
            .get(
                f"/v1/conversations/{conversation}/turns",
                params={"offset": offset, "limit": 500},
            )
            .json()
        )
        pages.extend(item["turn_id"] for item in page["items"])
        offset = page["next_offset"]
    assert pages == turn_ids


def test_concurrent_writes_to_one_conversation_share_transactions(
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
    service_settings: Settings,
) -> None:
    """Eight devices writing into one conversation through one process: their
    turns are committed together (events of one transaction share its xmin),
    because the service queues them in the ledger's group commit and takes
    no lock of its own that would let only one through at a time."""
    server = launch()
    devices = [client(server, add_device("bob", f"device-{n}")) for n in range(8)]
    conversation = devices[0].post("/v1/conversations").json()["conversation_id"]
    turns = 25

    def push(index: int) -> None:
        for n in range(turns):
            devices[index].put(
                f"/v1/conversations/{conversation}/turns/d{index}-{n}",
                json={"question": f"q{n}", "answer": f"a{n}"},
            ).raise_for_status()

    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        list(pool.map(push, range(len(devices))))
    with psycopg.connect(service_settings.postgres_conninfo()) as connection:
        row = connection.execute(
            sql.SQL(
                "SELECT count(*), count(DISTINCT xmin::text) FROM {} "
                "WHERE originator_id = %s AND originator_version > 1"
            ).format(
                sql.Identifier(service_settings.postgres_schema, "conversations_events")
            ),
            (UUID(conversation),),
        ).fetchone()
    assert row is not None
    events, transactions = row
    assert events == len(devices) * turns
    # One transaction per turn would be 200; shared, they are far fewer.
    assert transactions <= events * 0.75, (events, transactions)
    for http in devices:
        http.close()
