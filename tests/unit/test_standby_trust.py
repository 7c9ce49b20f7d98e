"""Which standby states a read may rely on (infra/http/standbys.py): the
states a PostgreSQL standby reports through STANDBY_STATE. The end-to-end case,
an old primary replaying past the fork, is tests/e2e/test_standby_timelines.py."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.infra.http.standbys import Replayed, trusted_replay

STREAMING = {"in_recovery": True, "position": 900, "receiver": 7}


@pytest.mark.parametrize(
    ("row", "primary_timeline", "trusted"),
    [
        # a promoted member: not a standby
        ({"in_recovery": False, "position": 900, "receiver": None}, 1, None),
        # a standby with no WAL receiver (its primary is gone, or it follows none)
        ({"in_recovery": True, "position": 900, "receiver": None}, 1, None),
        # streaming on the primary's timeline
        (
            {**STREAMING, "status": "streaming", "timeline": 3},
            3,
            Replayed(900, 3),
        ),
        # streaming a later timeline than this process has heard of
        (
            {**STREAMING, "status": "streaming", "timeline": 4},
            3,
            Replayed(900, 4),
        ),
        # streaming an older timeline than the primary's
        (
            {**STREAMING, "status": "streaming", "timeline": 2},
            3,
            None,
        ),
        # a receiver still connecting
        (
            {**STREAMING, "status": "starting", "timeline": 3},
            3,
            None,
        ),
        # a role that may not see the receiver's status: the position alone
        (
            {**STREAMING, "status": None, "timeline": None},
            3,
            Replayed(900, None),
        ),
    ],
)
def test_which_standby_states_a_read_may_rely_on(
    row: dict[str, Any], primary_timeline: int, trusted: Replayed | None
) -> None:
    assert trusted_replay(row, primary_timeline) == trusted
