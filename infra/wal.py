"""The WAL of a PostgreSQL server, as far as a purge must know it.

Which settings keep old segments (or their bytes) after a purge, whether the
role may list, switch and checkpoint, which segment files exist, and how to
move the insert position past a given segment. See infra/compaction.py and
docs/deletion.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors

# Server settings under which compaction can remove destroyed keys from the WAL
# (applied by scripts/postgres-up and docker-compose.yml; all are reloadable).
WAL_SETTINGS = {
    # Removed segments are unlinked, not renamed for reuse with old contents.
    "wal_recycle": "off",
    # New segments are written with zeros, not left with whatever the disk held.
    "wal_init_zero": "on",
    # Few spare segments, and no WAL kept beyond what recovery needs.
    "min_wal_size": "32MB",
    "wal_keep_size": "0",
}

MB = 1024 * 1024
# A wal_keep_size up to this is no hold: the purge switches segments until
# the WAL it keeps begins after the destroyed keys (Patroni 3.0 refuses less
# than 16MB; each switch writes one zero-filled segment on every member).
MAX_FORCED_KEEP_BYTES = 64 * MB

_SEGMENT = re.compile(r"^[0-9A-F]{24}(\.partial)?$")


def position(name: str) -> str:
    """Where a segment file lies in the WAL, whatever its timeline.

    A segment's name is its timeline (8 hex digits) then its place (16). A new
    timeline continues the old one's positions, and its first segment begins
    with a copy of the old one's: a segment of any timeline at or before a
    place may hold what was written there. PostgreSQL removes old segments by
    place alone for the same reason (RemoveOldXlogFiles ignores the timeline).
    """
    return name[8:24]


def up_to(names: list[str], target: str) -> list[str]:
    """The segment files among `names` at or before `target`'s place, oldest
    first (`.history` and other files hold no records)."""
    place = position(target)
    held = (n for n in names if _SEGMENT.match(n) and position(n) <= place)
    return sorted(held, key=lambda name: (position(name), name))


@dataclass(frozen=True, slots=True)
class WalPrivileges:
    can_list: bool
    can_force: bool


def wal_privileges(connection: psycopg.Connection[Any]) -> WalPrivileges:
    row = connection.execute(
        "SELECT r.rolsuper,"
        " has_function_privilege('pg_ls_waldir()', 'EXECUTE'),"
        " has_function_privilege('pg_switch_wal()', 'EXECUTE'),"
        " pg_has_role('pg_checkpoint', 'MEMBER')"
        " FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    assert row is not None
    superuser, can_list, can_switch, can_checkpoint = (bool(value) for value in row)
    return WalPrivileges(
        can_list=superuser or can_list,
        can_force=superuser or (can_switch and can_checkpoint),
    )


def wal_retention_settings(connection: psycopg.Connection[Any]) -> list[str]:
    """Server settings that keep WAL segments (or their bytes) after a purge."""
    row = connection.execute(
        "SELECT current_setting('wal_recycle'), current_setting('archive_mode'),"
        " pg_size_bytes(current_setting('wal_keep_size')),"
        " current_setting('wal_keep_size'),"
        " (SELECT count(*) FROM pg_replication_slots WHERE restart_lsn IS NOT NULL)"
    ).fetchone()
    assert row is not None
    recycle, archive_mode, keep_bytes, keep_size, slots = row
    holds = []
    if recycle == "on":
        holds.append(
            "wal_recycle=on (old segments are renamed for reuse with their contents)"
        )
    if archive_mode != "off":
        holds.append(
            f"archive_mode={archive_mode} (archived segments keep destroyed keys "
            "for as long as the archive keeps them)"
        )
    if keep_bytes > MAX_FORCED_KEEP_BYTES:
        # Up to that, the purge switches past what it keeps (`move_past`).
        holds.append(
            f"wal_keep_size={keep_size} (more than the "
            f"{MAX_FORCED_KEEP_BYTES // MB}MB the purge writes past)"
        )
    if slots:
        holds.append(f"{slots} replication slot(s) retain WAL")
    return holds


def server_check(conninfo: str) -> list[str]:
    """What keeps this server from removing destroyed keys from its WAL.

    For the start-up check: an empty list means the purge can complete.
    """
    with psycopg.connect(conninfo, autocommit=True) as connection:
        findings = wal_retention_settings(connection)
        privileges = wal_privileges(connection)
    if not privileges.can_list:
        findings.append("cannot list pg_wal to verify a purge (grant pg_monitor)")
    if not privileges.can_force:
        findings.append(
            "cannot force WAL segments out (needs superuser, or EXECUTE on "
            "pg_switch_wal() and the pg_checkpoint role): a purge completes only "
            "once the server's own checkpoints have removed them"
        )
    return findings


def segments(connection: psycopg.Connection[Any]) -> list[str]:
    names = [
        str(row[0])
        for row in connection.execute("SELECT name FROM pg_ls_waldir()").fetchall()
    ]
    return sorted(name for name in names if _SEGMENT.match(name))


def highest_segment(connection: psycopg.Connection[Any]) -> str:
    """The last segment file that exists now, or the one being written.

    Files named beyond the one being written are pre-allocated, or were
    recycled (renamed) while wal_recycle was on and hold older WAL: both count.
    """
    current = current_segment(connection)
    try:
        existing = segments(connection)
    except errors.InsufficientPrivilege:
        existing = []
    # By place: an old timeline's segment beyond the new one's insert position
    # (an old primary's tail, a pre-allocated file) counts.
    return max([current, *(name[:24] for name in existing)], key=position)


def current_segment(connection: psycopg.Connection[Any]) -> str:
    # +1: at a segment boundary pg_walfile_name names the previous segment.
    row = connection.execute(
        "SELECT pg_walfile_name(pg_current_wal_insert_lsn() + 1)"
    ).fetchone()
    assert row is not None
    return str(row[0])


def segments_up_to(connection: psycopg.Connection[Any], target: str) -> list[str]:
    return up_to(segments(connection), target)


def kept_from(connection: psycopg.Connection[Any]) -> str:
    """The oldest segment a CHECKPOINT now would keep for `wal_keep_size`:
    the one that far behind the insert position (the current one if 0)."""
    row = connection.execute(
        "SELECT pg_walfile_name(lsn + 1 - LEAST(keep, lsn - '0/0'::pg_lsn)) FROM"
        " (SELECT pg_current_wal_insert_lsn() AS lsn,"
        " pg_size_bytes(current_setting('wal_keep_size')) AS keep) AS now"
    ).fetchone()
    assert row is not None
    return str(row[0])


def move_past(connection: psycopg.Connection[Any], target: str) -> None:
    """Switch WAL segments until even what `wal_keep_size` keeps begins after
    `target`'s place (on a new timeline too: its first segments repeat the old
    places). A CHECKPOINT then removes every segment up to `target`, and a
    standby's restartpoint does once it has replayed that checkpoint."""
    for _ in range(64):  # far more segments than the kept ones
        if position(kept_from(connection)) > position(target):
            return
        # pg_switch_wal() does nothing in a segment with no record yet: write
        # one (the commit of a transaction that was given an id).
        connection.execute("SELECT pg_current_xact_id()")
        connection.execute("SELECT pg_switch_wal()")


def slot_holds(connection: psycopg.Connection[Any], target: str) -> list[str]:
    rows = connection.execute(
        "SELECT slot_name, pg_walfile_name(restart_lsn) FROM pg_replication_slots "
        "WHERE restart_lsn IS NOT NULL "
        "AND substr(pg_walfile_name(restart_lsn), 9) <= substr(%s, 9)",
        (target,),
    ).fetchall()
    return [f"replication slot {name} needs WAL from {seg}" for name, seg in rows]
