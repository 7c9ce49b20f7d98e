"""The WAL of every member, when the service names several hosts (docs/ha.md).

A purge verifies pg_wal on the server it is connected to: with a Patroni
cluster that is the primary, while each standby keeps its own copy of the
same WAL (and an old primary that rejoined keeps its own). With several hosts
in the connection string, each member is asked in turn, over a connection of
its own to that host alone: a standby first waits until it has replayed what
the primary flushed (the purge's segment switches and CHECKPOINT), runs
CHECKPOINT (a restartpoint, which removes the segments before that
checkpoint), then lists pg_wal. Every member that still holds a segment up to
the purge's target, or that cannot be asked, is a reason the purge stays
pending, named by host and port. While a member is away (`away`), the purge
does not force WAL out: the member could not be verified anyway, and it
needs that WAL to catch up.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from turnledger.infra import wal

MEMBER_CONNECT_TIMEOUT_SECONDS = 2
# How long a standby may take to replay the purge's switches and CHECKPOINT.
REPLAY_WAIT_SECONDS = 5.0


def members(conninfo: str) -> list[tuple[str, str]]:
    """(host, port) of each host of a multi-host conninfo; [] for one host."""
    params = conninfo_to_dict(conninfo)
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        return []
    ports = str(params.get("port") or "5432").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    return list(zip(hosts, ports, strict=True))


def away(conninfo: str) -> list[str]:
    """Members that cannot be asked, or standbys not streaming from the
    primary: forcing WAL out now would remove what they need to catch up
    (Patroni keeps one segment, and no slot, for them: docs/ha.md)."""
    found = []
    for host, port in members(conninfo):
        one = make_conninfo(
            conninfo,
            host=host,
            port=port,
            target_session_attrs="any",
            connect_timeout=MEMBER_CONNECT_TIMEOUT_SECONDS,
        )
        try:
            with psycopg.connect(one, autocommit=True) as connection:
                row = connection.execute(
                    "SELECT pg_is_in_recovery(), EXISTS (SELECT FROM"
                    " pg_stat_wal_receiver WHERE status = 'streaming')"
                ).fetchone()
        except psycopg.Error:
            found.append(f"{host}:{port}")
            continue
        if row is not None and row[0] and not row[1]:
            found.append(f"{host}:{port}")
    return found


def primary_flush_lsn(conninfo: str) -> str | None:
    """The primary's flushed WAL position: what every standby must replay
    before its restartpoint can drop what the primary dropped."""
    try:
        with psycopg.connect(
            conninfo, autocommit=True, connect_timeout=MEMBER_CONNECT_TIMEOUT_SECONDS
        ) as connection:
            row = connection.execute("SELECT pg_current_wal_flush_lsn()").fetchone()
    except psycopg.Error:
        return None  # each member's own check says what is wrong
    return None if row is None or row[0] is None else str(row[0])


def member_holds(
    conninfo: str, target: str, *, replay_wait_seconds: float = REPLAY_WAIT_SECONDS
) -> list[str]:
    """Why members still hold WAL up to `target` (a segment name); empty for
    a single host.

    Each standby first waits (up to `replay_wait_seconds`) until it has
    replayed what the primary has flushed now (the purge's switches and
    CHECKPOINT), then runs CHECKPOINT (a restartpoint, which removes the
    segments before the checkpoint it replayed), then lists pg_wal.
    """
    hosts = members(conninfo)
    if not hosts:
        return []
    flushed = primary_flush_lsn(conninfo)
    holds = []
    for host, port in hosts:
        name = f"{host}:{port}"
        one = make_conninfo(
            conninfo,
            host=host,
            port=port,
            target_session_attrs="any",
            connect_timeout=MEMBER_CONNECT_TIMEOUT_SECONDS,
        )
        try:
            with psycopg.connect(one, autocommit=True) as connection:
                row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
                standby = bool(row and row[0])
                behind = None
                if standby:
                    behind = _wait_for_replay(connection, flushed, replay_wait_seconds)
                    connection.execute("CHECKPOINT")
                kept = wal.segments_up_to(connection, target)
        except psycopg.Error as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            holds.append(f"member {name}: its WAL could not be checked ({first})")
            continue
        if kept:
            role = "standby" if standby else "primary"
            why = (
                f"; replayed only to {behind}, the primary is at {flushed}"
                if behind
                else ""
            )
            holds.append(
                f"member {name} ({role}): {len(kept)} segment(s) up to "
                f"{wal.position(target)} still in pg_wal (oldest {kept[0]}){why}"
            )
    return holds


def _wait_for_replay(
    connection: psycopg.Connection[Any], lsn: str | None, timeout: float
) -> str | None:
    """None once the standby has replayed `lsn`; else where its replay is."""
    if lsn is None:
        return None
    deadline = time.monotonic() + timeout
    while True:
        row = connection.execute(
            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn, pg_last_wal_replay_lsn()",
            (lsn,),
        ).fetchone()
        if row is None or row[0]:
            return None
        if time.monotonic() >= deadline:
            return str(row[1])
        time.sleep(0.05)
