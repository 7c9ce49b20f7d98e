"""The service on a Patroni cluster while its primary is killed (docs/ha.md).

Four devices write (two users, each turn sent again with its turn id until it
is acknowledged) and each user's third device long-polls, through the real
`turnledger serve` connected to all three members with
`target_session_attrs=read-write` and reading from a standby. The leader's
postmaster is killed with SIGKILL twice, then the whole leader member
(Patroni and postmaster) once, which is brought back afterwards and rejoins
(rewound by Patroni when it diverged). Throughout:

- every request is answered 200 or 503 with Retry-After, within the
  Retry-After plus a second (no 500, no dropped connection, no traceback);
- writes are acknowledged again within 5 s of a member accepting writes;
- every acknowledged turn is in its conversation's history exactly once, and
  every long-polling device is given every acknowledged turn of its user;
- a read sent with the position a write handed back sees that write, across
  the changes of roles;
- the signed checkpoint taken before the failovers and the one taken after
  are consistent (the transparency log went on as one log).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.ha.patroni import PatroniCluster
from tests.ha.service import cluster_settings, devices_workload, serving
from tests.ha.workload import LONG_POLL_SECONDS, Answer, Workload
from turnledger.infra.checkpoint import Checkpoint, newest_checkpoint
from turnledger.infra.proofs import prove_consistency
from turnledger.infra.signing import new_signing_key, trusted_public_key

pytestmark = pytest.mark.postgres

RESUME_WITHIN_SECONDS = 5.0


@dataclass(frozen=True)
class Failover:
    kind: str
    leader: str
    killed_at: float
    writable_at: float
    acknowledged_at: float
    new_leader: str

    def describe(self) -> str:
        return (
            f"{self.kind} of {self.leader}: {self.new_leader} writable after "
            f"{self.writable_at - self.killed_at:.2f} s, first write acknowledged "
            f"{self.acknowledged_at - self.killed_at:.2f} s after the kill"
        )


def fail_leader(cluster: PatroniCluster, work: Workload, kind: str) -> Failover:
    """Kill the leader (its postmaster, or the whole member); wait until writes
    are acknowledged again and the cluster has three healthy members."""
    leader = cluster.leader()
    killed_at = time.monotonic()
    if kind == "member":
        cluster.kill_member(leader)
    else:
        cluster.kill_postmaster(leader)
    writable_at = cluster.wait_writable(killed_at, timeout=60)
    deadline = writable_at + 30
    acknowledged_at = work.first_acknowledged_after(writable_at)
    while acknowledged_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
        acknowledged_at = work.first_acknowledged_after(writable_at)
    assert acknowledged_at is not None, f"no write acknowledged after {kind}"
    new_leader = cluster.leader()
    if kind == "member":
        cluster.start()  # the member's Patroni again: it rejoins as a replica
    cluster.wait_healthy(timeout=90)
    return Failover(kind, leader, killed_at, writable_at, acknowledged_at, new_leader)


def test_kills_of_the_primary_lose_nothing_and_writes_resume_within_5_s(
    healthy: PatroniCluster, tmp_path: Path
) -> None:
    checkpoints = tmp_path / "checkpoints"
    settings = cluster_settings(
        healthy,
        "ha_failover",
        audit_signing_key=SecretStr(new_signing_key()),
        audit_checkpoint_dir=checkpoints,
        audit_checkpoint_interval_seconds=0.5,
    )
    key = trusted_public_key(settings)
    retry_after = settings.http_retry_after_seconds
    with serving(settings, tmp_path / "server.log") as server:
        work = devices_workload(settings, server)
        work.start()
        try:
            time.sleep(2.0)
            before = newest_checkpoint(checkpoints, key)
            failovers = [
                fail_leader(healthy, work, kind)
                for kind in ("postmaster", "postmaster", "member")
            ]
            time.sleep(1.0)
        finally:
            work.finish()
        for failover in failovers:
            print(failover.describe())
        after = wait_for_checkpoint(checkpoints, key, beyond=before.tree_size)
        recorded = {
            w.conversation: history(server.base_url, w.token, w.conversation)
            for w in work.writers
        }
    log = server.log.read_text(errors="replace")

    ledger = work.ledger
    answers = ledger.answers
    statuses = {a.status for a in answers}
    assert statuses <= {200, 503}, [a for a in answers if a.status not in (200, 503)]
    assert all(a.retry_after for a in answers if a.status == 503)
    assert any(a.status == 503 for a in answers), "no request met a failover"
    # No hang: a write answered by its deadline (503 if the database has not
    # committed it by then), a read within the Retry-After, a long-poll
    # within its own timeout; each with half a second to spare.
    bound = {
        "put": settings.http_write_deadline_seconds,
        "read": retry_after,
        "sync": retry_after + LONG_POLL_SECONDS,
    }
    slow = [a for a in answers if a.answered - a.sent > bound[a.what] + 0.5]
    assert not slow, [since_kill(a, failovers) for a in slow]
    for failover in failovers:
        assert (
            failover.acknowledged_at - failover.writable_at < RESUME_WITHIN_SECONDS
        ), failover.describe()
        assert failover.new_leader != failover.leader

    # Nothing acknowledged lost or duplicated; the same receipt each time.
    assert not ledger.receipt_mismatches
    for writer in work.writers:
        turns = recorded[writer.conversation]
        assert len(turns) == len(set(turns)), "a turn was recorded twice"
        mine = {t for t in ledger.acknowledged if t.startswith(f"{writer.name}-")}
        assert mine <= set(turns), sorted(mine - set(turns))[:5]
    # Every long-polling device was given every acknowledged turn of its user,
    # and without waiting for its long-poll to time out: the service listens
    # again after a failover and wakes every long-poll to read from its cursor.
    for poller in work.pollers:
        assert not work.undelivered(poller.user), sorted(work.undelivered(poller.user))
    lags = [
        ledger.delivered_at[t] - due(at, failovers)
        for t, at in ledger.acknowledged_at.items()
    ]
    late = sorted(
        (round(ledger.delivered_at[t] - due(at, failovers), 2), t)
        for t, at in ledger.acknowledged_at.items()
        if ledger.delivered_at[t] - due(at, failovers) >= LONG_POLL_SECONDS / 2
    )
    assert not late, late[-10:]
    # The transparency log went on: the checkpoint taken before the failovers
    # is a prefix of the one taken after (a consistency proof verifies).
    proof = prove_consistency(None, settings, before, after)
    assert proof["old"]["tree_size"] < proof["new"]["tree_size"]
    # Read-your-writes across the changes of roles.
    assert not ledger.stale_reads, ledger.stale_reads
    assert "Traceback" not in log, log[-5000:]
    print(
        f"{len(ledger.acknowledged)} turns acknowledged, "
        f"{sum(a.status == 503 for a in answers)} answers 503, "
        f"{len(answers)} requests; slowest delivery {max(lags):.2f} s after "
        "its acknowledgement"
    )


def wait_for_checkpoint(directory: Path, key: Any, *, beyond: int) -> Checkpoint:
    deadline = time.monotonic() + 20
    while True:
        newest = newest_checkpoint(directory, key)
        if newest.tree_size > beyond or time.monotonic() > deadline:
            return newest
        time.sleep(0.2)


def due(acknowledged_at: float, failovers: list[Failover]) -> float:
    """When a turn acknowledged at `acknowledged_at` can be delivered: then, or
    once the service serves again if it was acknowledged within a second
    before a kill (its notification may be lost) or during the switch."""
    for failover in failovers:
        if failover.killed_at - 1.0 <= acknowledged_at <= failover.acknowledged_at:
            return failover.acknowledged_at
    return acknowledged_at


def since_kill(answer: Answer, failovers: list[Failover]) -> str:
    kills = [f.killed_at for f in failovers if f.killed_at <= answer.sent]
    after = answer.sent - max(kills) if kills else answer.sent
    return (
        f"{answer.what} {answer.status} sent {after:.2f} s after a kill, "
        f"answered in {answer.answered - answer.sent:.2f} s {answer.detail}"
    )


def history(base_url: str, token: str, conversation: str) -> list[str]:
    """Every turn id of the conversation, in order (every page)."""
    turn_ids: list[str] = []
    offset: int | None = 0
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as http:
        while offset is not None:
            page = http.get(
                f"/v1/conversations/{conversation}/turns",
                params={"offset": offset, "limit": 500},
            )
            page.raise_for_status()
            body = page.json()
            turn_ids.extend(item["turn_id"] for item in body["items"])
            offset = body["next_offset"]
    return turn_ids
