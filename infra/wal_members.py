"""The WAL of every member, when the service names several hosts (docs/ha.md).

A purge verifies pg_wal on the server it is connected to: with a Patroni
cluster that is the primary, while each standby keeps its own copy of the
same WAL (and an old primary that rejoined keeps its own). With several hosts
in the connection string, each member is asked in turn, over a connection of
its own to that host alone: a standby first runs CHECKPOINT (a restartpoint,
which removes the segments it no longer needs), then lists pg_wal. Every
member that still holds a segment up to the purge's target, or that cannot be
asked, is a reason the purge stays pending, named by host and port.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from turnledger.infra import wal

MEMBER_CONNECT_TIMEOUT_SECONDS = 2


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


def member_holds(conninfo: str, target: str) -> list[str]:
    """Why members other than the one verified still hold WAL up to `target`
    (a segment name); empty for a single host."""
    holds = []
    for host, port in members(conninfo):
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
                if standby:
                    connection.execute("CHECKPOINT")
                kept = wal.segments_up_to(connection, target)
        except psycopg.Error as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            holds.append(f"member {name}: its WAL could not be checked ({first})")
            continue
        if kept:
            role = "standby" if standby else "primary"
            holds.append(
                f"member {name} ({role}): {len(kept)} segment(s) up to "
                f"{wal.position(target)} still in pg_wal (oldest {kept[0]})"
            )
    return holds
