"""Deletion on a Patroni cluster: what each member keeps after a failover.

The purge's WAL settings reach every member through the cluster's own
configuration. A conversation's turns are deleted, the primary's postmaster
is killed at once, the old primary is rewound and rejoins; the purge runs
again on the new primary (as the service's retry does) until it says
complete: it switches WAL past the one segment Patroni keeps, checkpoints, and
has each standby replay that and run its restartpoint. Then all three
members' data directories, pg_wal included (the timelines' `.history` files,
what pg_rewind copied), are read as an attacker with the master key would:
no destroyed key, raw, wrapped, hex or base64, anywhere, and no text of a
destroyed turn opens, while the surviving turns do (the positive control).
With a member away, the purge stays pending, names it, and leaves the WAL it
needs to catch up.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.ha.patroni import PatroniCluster
from tests.ha.service import cluster_settings
from tests.integration.forensic import (
    DOOMED,
    OWNER,
    attack,
    files_under,
    hits,
    needles,
    read_all,
    write_scenario,
)
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.service_layer.purge import PurgeReport
from turnledger.infra.settings import Settings
from turnledger.infra.wal import WAL_SETTINGS

pytestmark = pytest.mark.postgres

MEMBERS = ("m1", "m2", "m3")


def test_the_purge_settings_are_on_every_member(healthy: PatroniCluster) -> None:
    for member in MEMBERS:
        with psycopg.connect(healthy.member_conninfo(member)) as connection:
            for name, value in WAL_SETTINGS.items():
                row = connection.execute(f"SHOW {name}").fetchone()
                assert row is not None
                if name == "wal_keep_size":
                    # Patroni 3.0's floor: one segment, which the purge
                    # writes past (docs/ha.md).
                    assert row[0] == "16MB", (member, name, row[0])
                else:
                    assert row[0] == value, (member, name, row[0])


@pytest.mark.parametrize("held", [False, True], ids=["purging", "held"])
def test_after_a_failover_and_a_rewind_no_member_keeps_a_destroyed_key(
    healthy: PatroniCluster, held: bool
) -> None:
    """`held`: a transaction older than the deletion keeps the purge from
    rewriting until the kill, so the rewrite and the WAL's clearing happen on
    the new primary's timeline."""
    schema = "ha_purge_held" if held else "ha_purge"
    settings = cluster_settings(healthy, schema).model_copy(
        update={"postgres_replica_host": None}
    )
    master = master_key(settings)
    ledger = open_conversations(settings)
    older = None
    try:
        scenario = write_scenario(ledger)
        recorded = key_table(settings, scenario.conversation_id)
        if held:
            older = psycopg.connect(healthy.conninfo)
            older.execute("SELECT pg_current_xact_id()")  # open, with an xid
        receipt = ledger.delete_history(
            OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
        )
        if held:
            assert receipt.purge is not None
            assert any("older transaction" in r for r in receipt.purge.pending_reasons)
        left = key_table(settings, scenario.conversation_id)
        # Killed at once: the purge's own CHECKPOINT may not have ended, and
        # every member's WAL still holds the keys.
        leader = healthy.leader()
        killed_at = time.monotonic()
        healthy.kill_postmaster(leader)
        healthy.wait_writable(killed_at, timeout=60)
        healthy.wait_healthy(timeout=90)  # the old primary rewound and back
        report, seen = purge_until_complete(ledger)
    finally:
        ledger.close()
        if older is not None:
            older.close()
    destroyed = {k: v for k, v in recorded.items() if k not in left}
    kept = {k: v for k, v in recorded.items() if k in left}
    assert destroyed and kept
    copies = {m: read_all(files_under(healthy.data_dir(m))) for m in MEMBERS}
    print(
        f"purge at the deletion: {receipt.purge and receipt.purge.state}; "
        f"killed {leader}; purge {report.state} after the failover; reasons seen "
        f"{seen}; WAL files scanned: "
        + "; ".join(f"{m}: {wal_files(copies[m])}" for m in MEMBERS)
    )
    assert not report.compaction_pending, report
    # The scan reads the old primary's timeline history and what pg_rewind
    # gave it; every member holds a newer timeline's files.
    assert any(name.endswith(".history") for name in copies[leader]), leader
    for member in MEMBERS:
        # Positive control: the attack opens the turns still alive there.
        assert attack(scenario, copies[member], kept, master), member
        assert attack(scenario, copies[member], destroyed, master) == {}, member
        found = hits(copies[member], needles(scenario, destroyed, master))
        assert not found, (member, found[:5])


def purge_until_complete(
    ledger: object, timeout: float = 60.0
) -> tuple[PurgeReport, list[str]]:
    """Run the purge (as the service's retry does) until its compaction is
    complete or `timeout` passes; the report and every reason it gave."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        report = purge_again(ledger)
        seen.extend(r for r in report.pending_reasons if r not in seen)
        if not report.compaction_pending or time.monotonic() > deadline:
            return report, seen
        time.sleep(1.0)


def wal_files(contents: dict[str, bytes]) -> str:
    names = [Path(name).name for name in contents if "/pg_wal/" in name]
    partial = sum(name.endswith(".partial") for name in names)
    history = sum(name.endswith(".history") for name in names)
    return f"{len(names)} ({history} .history, {partial} .partial)"


def purge_again(ledger: object) -> PurgeReport:
    """The purge on the new primary; its pools may first meet the connections
    the failover broke."""
    for _ in range(40):
        try:
            return ledger.purge_deleted_history()  # type: ignore[attr-defined,no-any-return]
        except Exception:  # noqa: BLE001 - an outage error; the next try reconnects
            time.sleep(0.5)
    return ledger.purge_deleted_history()  # type: ignore[attr-defined,no-any-return]


def key_table(settings: Settings, conversation_id: object) -> dict[str, bytes]:
    with psycopg.connect(settings.postgres_conninfo()) as connection:
        rows = connection.execute(
            sql.SQL(
                "SELECT turn_id, wrapped_key FROM {} WHERE conversation_id = %s"
            ).format(sql.Identifier(settings.postgres_schema, "turn_keys")),
            (conversation_id,),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}


def test_a_member_away_is_named_and_its_wal_is_not_forced_out(
    healthy: PatroniCluster,
) -> None:
    """A whole member lost (the asynchronous replica, so writes go on): the
    purge stays pending and names it, and does not force WAL out meanwhile, so
    the member catches up by streaming when it is back; then the purge
    completes and no member keeps a destroyed key."""
    settings = cluster_settings(healthy, "ha_purge_away").model_copy(
        update={"postgres_replica_host": None}
    )
    master = master_key(settings)
    away = next(str(m["name"]) for m in healthy.members() if m["role"] == "replica")
    name = f"{healthy.host(away)}:{healthy.port}"
    ledger = open_conversations(settings)
    try:
        scenario = write_scenario(ledger)
        recorded = key_table(settings, scenario.conversation_id)
        healthy.kill_member(away)
        receipt = ledger.delete_history(
            OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
        )
        assert receipt.purge is not None and receipt.purge.compaction_pending
        reasons = receipt.purge.pending_reasons
        assert any(
            f"member {name}: its WAL could not be checked" in r for r in reasons
        ), reasons
        assert any(f"not forced out while {name}" in r for r in reasons), reasons
        left = key_table(settings, scenario.conversation_id)
        healthy.start()  # its Patroni again: it must catch up by streaming
        back = healthy.wait_healthy(timeout=90)
        report, seen = purge_until_complete(ledger)
    finally:
        ledger.close()
    destroyed = {k: v for k, v in recorded.items() if k not in left}
    kept = {k: v for k, v in recorded.items() if k in left}
    print(
        f"{away} away: reasons {reasons}; healthy {back:.1f} s after its start; "
        f"purge {report.state}; reasons seen after {seen}"
    )
    assert not report.compaction_pending, report
    for member in MEMBERS:
        copy = read_all(files_under(healthy.data_dir(member)))
        assert attack(scenario, copy, kept, master), member
        assert attack(scenario, copy, destroyed, master) == {}, member
        assert not hits(copy, needles(scenario, destroyed, master)), member
