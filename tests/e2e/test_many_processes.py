"""Three `turnledger serve` processes on one database, behind no load balancer
at all: every request of every device goes to a process picked at random.

Devices of two users start conversations, confirm turns (some built on the
version they last saw, so they race and retry), delete turns and pull, each in
a thread of its own. At the end every device pulls once more, and the devices
of each user hold exactly the same turns, each acknowledged turn once, with
every deletion applied; the ledger's own history agrees.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

from tests.e2e.conftest import Server, client
from tests.e2e.replica import Replica
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

PROCESSES = 3
USERS = {"alice": 4, "bob": 2}
STEPS_PER_DEVICE = 40


@pytest.fixture
def service_settings(postgres_settings: Settings) -> Settings:
    # Three processes share the database server with other tests: small pools.
    return postgres_settings.model_copy(update={"postgres_pool_size": 3})


@dataclass
class Device:
    user: str
    name: str
    clients: list[httpx.Client]
    rng: random.Random
    replica: Replica = field(default_factory=Replica)
    acknowledged: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    deleted: set[tuple[str, str]] = field(default_factory=set)

    def any_process(self) -> httpx.Client:
        return self.rng.choice(self.clients)

    def step(self, n: int) -> None:
        conversations = sorted(self.replica.turns)
        roll = self.rng.random()
        if not conversations or roll < 0.1:
            key = f"{self.user}-c{self.rng.randrange(3)}"
            started = self.any_process().post(
                "/v1/conversations", json={"client_key": key}
            )
            assert started.status_code == 201, started.text
            self.replica.sync(self.any_process())
        elif roll < 0.75:
            conversation = self.rng.choice(conversations)
            turn_id = f"{self.name}-{n}"
            text = (f"q{n} of {self.name}", f"a{n} for {self.name}")
            body: dict[str, object] = {"question": text[0], "answer": text[1]}
            if self.rng.random() < 0.5:
                body["expected_version"] = self.replica.versions[conversation]
            for _ in range(20):
                response = self.any_process().put(
                    f"/v1/conversations/{conversation}/turns/{turn_id}", json=body
                )
                if response.status_code != 409:
                    break
                # Somebody wrote first: pull, and build on what is there now.
                self.replica.sync(self.any_process())
                body["expected_version"] = self.replica.versions[conversation]
            assert response.status_code == 200, response.text
            self.acknowledged[(conversation, turn_id)] = text
        elif roll < 0.85:
            conversation = self.rng.choice(conversations)
            live = [
                turn
                for turn, text in self.replica.turns[conversation].items()
                if text != (None, None)
            ]
            if live:
                victim = self.rng.choice(live)
                for _ in range(5):
                    deleted = self.any_process().post(
                        f"/v1/conversations/{conversation}/deletions",
                        json={"turn_ids": [victim]},
                    )
                    if deleted.status_code == 503:
                        # purge_incomplete: the deletion stands and is served
                        # as such; sending it again completes the purge. (Seen
                        # when purges of several processes race.)
                        assert deleted.json()["error"]["code"] == "purge_incomplete"
                        self.deleted.add((conversation, victim))
                        continue
                    break
                assert deleted.status_code in (200, 409), deleted.text
                if deleted.status_code == 200:
                    self.deleted.add((conversation, victim))
        else:
            self.replica.sync(self.any_process())


@pytest.mark.parametrize("seed", [1, 2])
def test_three_processes_with_devices_moving_at_random_converge(
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
    seed: int,
) -> None:
    servers = [launch() for _ in range(PROCESSES)]
    rng = random.Random(seed)
    devices = []
    for user, count in USERS.items():
        for index in range(count):
            token = add_device(user, f"{user}-{index}")
            devices.append(
                Device(
                    user,
                    f"{user}{index}",
                    [client(server, token) for server in servers],
                    random.Random(rng.random()),
                )
            )
    failures: list[BaseException] = []

    def run(device: Device) -> None:
        try:
            for n in range(STEPS_PER_DEVICE):
                device.step(n)
        except httpx.TransportError as error:  # reported by the main thread
            # Which request, so a hang can be traced in the servers' logs.
            failures.append(
                AssertionError(
                    f"{device.name}: {error!r} on {error.request.method} "
                    f"{error.request.url} at {time.strftime('%H:%M:%S')}"
                )
            )
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(d,)) for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, (failures, *_log_tails(servers))

    for device in devices:
        device.replica.sync(device.any_process())
    for user in USERS:
        mine = [d for d in devices if d.user == user]
        reference = mine[0].replica
        for other in mine[1:]:
            assert other.replica.turns == reference.turns, other.name
            assert other.replica.versions == reference.versions, other.name
        deleted = set().union(*(d.deleted for d in mine))
        acknowledged = {k: v for d in mine for k, v in d.acknowledged.items()}
        for (conversation, turn_id), text in acknowledged.items():
            held = reference.turns[conversation][turn_id]
            expected = (None, None) if (conversation, turn_id) in deleted else text
            assert held == expected, (conversation, turn_id)
        for conversation, turns in reference.turns.items():
            # Nothing but what was acknowledged, and every deletion applied.
            assert set(turns) == {t for c, t in acknowledged if c == conversation}
            history = (
                mine[0]
                .any_process()
                .get(f"/v1/conversations/{conversation}/turns", params={"limit": 500})
            )
            items = history.json()["items"]
            assert [i["turn_id"] for i in items] == list(turns)
            assert {i["turn_id"]: (i["question"], i["answer"]) for i in items} == turns
    for device in devices:
        for http in device.clients:
            http.close()


def _log_tails(servers: list[Server]) -> list[str]:
    """The end of each server's log, for a failure's report."""
    return [s.log.read_text(errors="replace")[-4000:] for s in servers]
