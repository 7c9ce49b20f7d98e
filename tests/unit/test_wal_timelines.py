"""infra/wal.py and infra/wal_members.py judge WAL segments the same way, by
place, across a timeline switch (docs/ha.md).

After a failover the new primary writes timeline 2, whose first segment
begins with a copy of timeline 1's last one; an old primary that rejoins keeps
timeline 1's segments beside the ones it was given. A segment of either
timeline at or before the purge's target may hold a destroyed key, and the
insert position is past the target only once its place is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from turnledger.infra import wal, wal_members

TARGET = "000000010000000000000005"  # recorded on timeline 1, before a failover
LISTING = [
    "000000010000000000000004",
    "000000010000000000000005.partial",  # the old timeline's last, renamed
    "000000020000000000000005",  # timeline 2 begins within place 5
    "000000020000000000000006",
    "00000002.history",
]
HELD = [
    "000000010000000000000004",
    "000000010000000000000005.partial",
    "000000020000000000000005",
]


class FakeServer:
    """Answers the few queries wal.py and wal_members.py send."""

    def __init__(self, listing: list[str], current: str, standby: bool) -> None:
        self.listing = list(listing)
        self.current = current
        self.standby = standby
        self.sent: list[str] = []

    def execute(self, query: str, *args: Any) -> FakeServer:
        self.sent.append(query)
        if "pg_switch_wal()" in query:
            place = int(wal.position(self.current), 16) + 1
            self.current = f"{self.current[:8]}{place:016X}"
        if "pg_ls_waldir" in query:
            self._rows = [(name,) for name in self.listing]
        elif "pg_current_wal_insert_lsn()" in query:
            # The segment written now, and (wal_keep_size 0) the oldest kept.
            self._rows = [(self.current,)]
        elif "pg_last_wal_replay_lsn" in query:
            self._rows = [(True, "0/5000000")]
        elif "pg_is_in_recovery" in query:
            self._rows = [(self.standby,)]
        else:
            self._rows = [(None,)]
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...]:
        return self._rows[0]


def test_segments_of_every_timeline_up_to_the_target_are_held() -> None:
    server = FakeServer(LISTING, current="000000020000000000000006", standby=False)
    assert wal.segments_up_to(server, TARGET) == HELD  # type: ignore[arg-type]


def test_a_member_is_held_by_the_same_segments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer(LISTING, current="000000020000000000000006", standby=True)

    @contextmanager
    def connect(*args: object, **kwargs: object) -> Iterator[FakeServer]:
        yield server

    monkeypatch.setattr(wal_members.psycopg, "connect", connect)
    holds = wal_members.member_holds("host=h1,h2 port=5432", TARGET)
    assert len(holds) == 2  # each host answered by the same fake
    assert all(f"{len(HELD)} segment(s) up to" in hold for hold in holds), holds
    assert all(f"(oldest {HELD[0]})" in hold for hold in holds), holds


def test_the_insert_position_moves_past_the_target_on_a_new_timeline() -> None:
    # Timeline 2 writes place 5 again: its name sorts above the target's, but
    # it may begin with the destroyed keys' records; a switch is needed.
    server = FakeServer(LISTING, current="000000020000000000000005", standby=False)
    wal.move_past(server, TARGET)  # type: ignore[arg-type]
    assert server.current == "000000020000000000000006"
    assert any("pg_switch_wal()" in query for query in server.sent)


def test_the_highest_segment_is_the_furthest_place_of_any_timeline() -> None:
    # An old timeline's segment beyond the new one's insert position (an old
    # primary's tail copied back, a pre-allocated file).
    server = FakeServer(
        ["000000010000000000000007", "000000020000000000000006"],
        current="000000020000000000000006",
        standby=False,
    )
    assert wal.highest_segment(server) == "000000010000000000000007"  # type: ignore[arg-type]


def test_position_ignores_the_timeline() -> None:
    assert wal.position("000000020000000000000005") == wal.position(TARGET)
    assert wal.up_to(LISTING, "000000030000000000000004") == LISTING[:1]
