"""What the purge says about each member of a cluster that still holds WAL
(infra/wal_members.py, docs/ha.md): a member that cannot be asked, and a
standby that has not replayed the primary's checkpoint, are named with why."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from turnledger.infra import wal_members

TARGET = "000000010000000000000004"
CONNINFO = "host=10.0.0.1,10.0.0.2 port=5432 target_session_attrs=read-write"


class Standby:
    """A standby whose replay stays at 0/4000148 while the primary is at
    0/6000060, and whose pg_wal still lists two segments up to the target."""

    def execute(self, query: str, *args: Any) -> Standby:
        if "pg_current_wal_flush_lsn" in query:
            self._rows: list[tuple[Any, ...]] = [("0/6000060",)]
        elif "pg_last_wal_replay_lsn" in query:
            self._rows = [(False, "0/4000148")]
        elif "pg_is_in_recovery" in query:
            self._rows = [(True,)]
        elif "pg_ls_waldir" in query:
            self._rows = [
                ("000000010000000000000003",),
                ("000000010000000000000004",),
                ("000000010000000000000006",),
            ]
        else:
            self._rows = [(None,)]
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return self._rows[0]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows


def test_a_member_down_and_a_standby_behind_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextmanager
    def connect(conninfo: str, **kwargs: object) -> Iterator[Standby]:
        if "10.0.0.2" in conninfo and "10.0.0.1" not in conninfo:
            raise psycopg.OperationalError("connection refused\nmore detail")
        yield Standby()

    monkeypatch.setattr(wal_members.psycopg, "connect", connect)
    holds = wal_members.member_holds(CONNINFO, TARGET, replay_wait_seconds=0.1)
    assert holds == [
        "member 10.0.0.1:5432 (standby): 2 segment(s) up to 0000000000000004 "
        "still in pg_wal (oldest 000000010000000000000003); replayed only to "
        "0/4000148, the primary is at 0/6000060",
        "member 10.0.0.2:5432: its WAL could not be checked (connection refused)",
    ]


def test_one_host_has_no_members_to_ask() -> None:
    assert wal_members.member_holds("host=10.0.0.1 port=5432", TARGET) == []
