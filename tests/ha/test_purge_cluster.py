"""Deletion on a Patroni cluster: what each member keeps after a failover.

The purge's WAL settings reach every member through the cluster's own
configuration. A conversation's turns are deleted, the primary's postmaster
is killed, the old primary is rewound and rejoins; the purge runs again on the
new primary. Then all three members' data directories, pg_wal included, are
read as an attacker with the master key would: wherever a destroyed turn can
still be opened, the purge must not say "complete", and it names the member
and what it keeps.
"""

from __future__ import annotations

import time

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
    read_all,
    write_scenario,
)
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.service_layer.purge import PurgeReport
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
                    # Patroni 3.0's floor: one segment (docs/ha.md).
                    assert row[0] == "16MB", (member, name, row[0])
                else:
                    assert row[0] == value, (member, name, row[0])


def test_no_member_keeps_a_destroyed_turn_the_purge_calls_complete(
    healthy: PatroniCluster,
) -> None:
    settings = cluster_settings(healthy, "ha_purge").model_copy(
        update={"postgres_replica_host": None}
    )
    master = master_key(settings)
    ledger = open_conversations(settings)
    try:
        scenario = write_scenario(ledger)
        recorded = key_table(settings.postgres_conninfo(), scenario.conversation_id)
        ledger.delete_history(OWNER, scenario.conversation_id, turn_ids=list(DOOMED))
        destroyed = {
            k: v
            for k, v in recorded.items()
            if k
            not in key_table(settings.postgres_conninfo(), scenario.conversation_id)
        }
        assert destroyed, "the deletion destroyed no key"
        leader = healthy.leader()
        killed_at = time.monotonic()
        healthy.kill_postmaster(leader)
        healthy.wait_writable(killed_at, timeout=60)
        healthy.wait_healthy(timeout=90)  # the old primary rewound and back
        report = purge_again(ledger)
    finally:
        ledger.close()
    for member in MEMBERS:
        with psycopg.connect(healthy.member_conninfo(member), autocommit=True) as c:
            c.execute("CHECKPOINT")  # a standby's restartpoint drops old WAL too
    opened = {
        member: attack(
            scenario,
            read_all(files_under(healthy.data_dir(member))),
            destroyed,
            master,
        )
        for member in MEMBERS
    }
    holding = sorted(member for member, found in opened.items() if found)
    print(
        f"after the failover: purge {report.state}; reasons {report.pending_reasons};"
        f" members still opening destroyed turns: {holding}"
    )
    if holding:
        assert report.compaction_pending, (holding, report)
    # Every member that can still open a destroyed turn is named, with why.
    for member in holding:
        name = f"member {healthy.host(member)}:{healthy.port} "
        assert any(name in reason for reason in report.pending_reasons), (
            member,
            report.pending_reasons,
        )


def purge_again(ledger: object) -> PurgeReport:
    """The purge on the new primary; its pools may first meet the connections
    the failover broke."""
    for _ in range(40):
        try:
            return ledger.purge_deleted_history()  # type: ignore[attr-defined,no-any-return]
        except Exception:  # noqa: BLE001 - an outage error; the next try reconnects
            time.sleep(0.5)
    return ledger.purge_deleted_history()  # type: ignore[attr-defined,no-any-return]


def key_table(conninfo: str, conversation_id: object) -> dict[str, bytes]:
    with psycopg.connect(conninfo) as connection:
        rows = connection.execute(
            sql.SQL(
                "SELECT turn_id, wrapped_key FROM {} WHERE conversation_id = %s"
            ).format(sql.Identifier("ha_purge", "turn_keys")),
            (conversation_id,),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}
