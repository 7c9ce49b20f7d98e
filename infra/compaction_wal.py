"""What keeps a key compaction's WAL from being verified clear
(infra/compaction.py, step 3), said as the holds an operator reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from turnledger.infra import wal


def wal_holds(
    connection: psycopg.Connection[Any],
    *,
    target: str,
    config: Sequence[str],
    members: Sequence[str],
    away: Sequence[str],
    remaining: Sequence[str],
    checkpointing: bool,
    can_force: bool,
) -> tuple[str, ...]:
    """Why the segments up to `target` may still hold destroyed keys (empty:
    verified gone). `config`: the server's settings that retain WAL;
    `members`: what other hosts still keep; `away`: hosts not forced past;
    `remaining`: the segments still in this server's pg_wal."""
    # Recycled segments keep their bytes under new names, and archived ones
    # outside pg_wal: with either, an empty listing proves nothing.
    unverifiable = [
        hold for hold in config if hold.startswith(("wal_recycle", "archive_mode"))
    ]
    if not remaining and not unverifiable and not members:
        return ()
    holds = list(config) + list(members)
    if away:
        holds.append(
            f"not forced out while {', '.join(away)} cannot catch up "
            "without it (down, or not streaming)"
        )
    if remaining and checkpointing:
        holds.append(
            "a CHECKPOINT is removing the segments; it completes in the background"
        )
    elif remaining:
        holds.append(
            f"{len(remaining)} segment(s) up to {target} still in pg_wal"
            f" (oldest {remaining[0]})"
        )
        if not can_force:
            holds.append(
                "no privilege to force them out: needs superuser, or EXECUTE "
                "on pg_switch_wal() and the pg_checkpoint role"
            )
        holds.extend(wal.slot_holds(connection, target))
    return tuple(f"WAL retention: {hold}" for hold in holds)
