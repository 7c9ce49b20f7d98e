"""Write pause when the primary of a Patroni cluster is killed (docs/ha.md).

A private 3-member cluster (scripts/patroni-cluster), `turnledger serve` on
all three members (`target_session_attrs=read-write`, reads on a standby), 4
devices of 2 users writing (each turn sent again with its turn id until
acknowledged, 0.1 s after a 503) and one long-polling device per user. The
leader's postmaster is killed (SIGKILL) `--kills` times, the cluster left to
heal (three members) between kills.

For each kill: when a member first commits a write of a probe client of its
own (the baseline: what the database alone gives), and when the service first
acknowledges a device's write sent after the kill, answered once a member
commits again. The write pause is the second, from the kill; the service's
share is the difference. At the end: acknowledged turns missing from their
conversation (lost), recorded twice (duplicated), or never given to their
user's long-polling device (undelivered); writes missing from the read their
device sent next with the position the write handed back (stale reads); and
every status answered.

    .venv/bin/python bench/failover_bench.py [--kills 5]

Needs root (or the postgres user) and the Debian packages patroni and
etcd-server (scripts/install-patroni).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ha.patroni import available, patroni_cluster  # noqa: E402
from tests.ha.service import cluster_settings, devices_workload, serving  # noqa: E402
from tests.ha.test_failover import Failover, fail_leader, history  # noqa: E402
from tests.ha.workload import Workload  # noqa: E402

TARGET_SECONDS = 5.0


def first_write_after(work: Workload, failover: Failover) -> float:
    """Seconds from the kill to the first acknowledged write sent after it
    and answered once a member commits again."""
    with work.ledger.lock:
        answered = [
            a.answered
            for a in work.ledger.answers
            if a.what == "put"
            and a.status == 200
            and a.sent >= failover.killed_at
            and a.answered >= failover.writable_at
        ]
    return min(answered) - failover.killed_at


def run(kills: int) -> int:
    if not available():
        print("patroni and etcd are not installed: run scripts/install-patroni")
        return 2
    with patroni_cluster() as cluster, tempfile.TemporaryDirectory() as scratch:
        cluster.wait_healthy()
        settings = cluster_settings(cluster, "failover_bench")
        with serving(settings, Path(scratch) / "server.log") as server:
            work = devices_workload(settings, server)
            work.start()
            try:
                time.sleep(2.0)
                failovers = [
                    fail_leader(cluster, work, "postmaster") for _ in range(kills)
                ]
            finally:
                work.finish()
            pauses = [first_write_after(work, f) for f in failovers]
            recorded = {
                w.name: history(server.base_url, w.token, w.conversation)
                for w in work.writers
            }
    return report(work, failovers, pauses, recorded)


def report(
    work: Workload,
    failovers: list[Failover],
    pauses: list[float],
    recorded: dict[str, list[str]],
) -> int:
    print(
        "kill | old -> new leader | a member commits (probe) | write pause "
        "| service's share"
    )
    for n, (failover, pause) in enumerate(zip(failovers, pauses, strict=True), 1):
        database = failover.writable_at - failover.killed_at
        print(
            f"{n:4} | {failover.leader} -> {failover.new_leader}       | "
            f"{database:6.2f} s                 | {pause:6.2f} s    | "
            f"{pause - database:5.2f} s"
        )
    median = statistics.median(pauses)
    ledger = work.ledger
    lost = duplicated = 0
    for writer in work.writers:
        turns = recorded[writer.name]
        duplicated += len(turns) - len(set(turns))
        mine = {t for t in ledger.acknowledged if t.startswith(f"{writer.name}-")}
        lost += len(mine - set(turns))
    undelivered = sum(len(work.undelivered(p.user)) for p in work.pollers)
    statuses = Counter(a.status for a in ledger.answers)
    print(
        f"median write pause {median:.2f} s over {len(pauses)} kills "
        f"(target <= {TARGET_SECONDS:g} s); range {min(pauses):.2f}-{max(pauses):.2f} s"
    )
    stale = len(ledger.stale_reads)
    print(
        f"acknowledged {len(ledger.acknowledged)}; lost {lost}; duplicated "
        f"{duplicated}; undelivered {undelivered}; stale reads {stale} (a write "
        f"missing from its device's next read); statuses {dict(statuses)}"
    )
    ok = (
        median <= TARGET_SECONDS
        and lost == duplicated == undelivered == stale == 0
        and set(statuses) <= {200, 503}
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    return run(parser.parse_args().kills)


if __name__ == "__main__":
    raise SystemExit(main())
