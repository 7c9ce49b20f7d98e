"""Rebuilding the read side from the log, and upgrading a first-release store."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol
from uuid import UUID

from turnledger.domain.chain import ChainFormatError, read_link
from turnledger.domain.conversation import fold_key_id
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.ledger_rows import ConversationRow, FoldRow, TurnRow
from turnledger.projections.log_replay import replay_events
from turnledger.projections.read_side import LedgerView
from turnledger.projections.turn_texts import open_noting_damaged

_PAGE = 1000


Rows = tuple[list[ConversationRow], list[TurnRow], list[FoldRow]]


class RebuildableReadSide(Protocol):
    def replace_read_side(self, view: LedgerView) -> None: ...

    def read_side_is_empty(self) -> bool: ...

    def read_side_rows(self) -> Rows: ...


def live_rows(ledger: Conversations) -> Rows:
    """Every row of the store's read side."""
    recorder: RebuildableReadSide = ledger.recorder  # type: ignore[assignment]
    return recorder.read_side_rows()


def compare_read_sides(
    live: Rows, replayed: Rows, damaged: Collection[tuple[UUID, str]] = ()
) -> list[str]:
    """What differs between two read sides, one line per row (empty: equal).

    `damaged`: (conversation id, key id) of texts whose key is damaged. The
    log cannot give their sizes (only their text could), so the live rows'
    sizes are not compared for them; the audit reports the key.
    """
    live = _without_sizes(live, set(damaged))
    replayed = _without_sizes(replayed, set(damaged))
    differences = []
    for name, key, mine, theirs in (
        ("conversation", lambda r: r.conversation_id, live[0], replayed[0]),
        ("turn", lambda r: (r.conversation_id, r.position), live[1], replayed[1]),
        ("fold", lambda r: (r.conversation_id, r.fold_id), live[2], replayed[2]),
    ):
        left = {key(row): row for row in mine}
        right = {key(row): row for row in theirs}
        for identity in sorted(left.keys() | right.keys(), key=str):
            if left.get(identity) != right.get(identity):
                differences.append(
                    f"{name} {identity}: live {left.get(identity)!r}, "
                    f"log {right.get(identity)!r}"
                )
    return differences


def _without_sizes(rows: Rows, damaged: set[tuple[UUID, str]]) -> Rows:
    if not damaged:
        return rows
    conversations, turns, folds = rows
    return (
        conversations,
        [
            replace(row, sizes=None)
            if (row.conversation_id, row.turn_id) in damaged
            else row
            for row in turns
        ],
        [
            replace(row, summary_json_bytes=None, summary_chars=None)
            if (row.conversation_id, fold_key_id(row.fold_id)) in damaged
            else row
            for row in folds
        ],
    )


def replay_log(
    ledger: Conversations,
    *,
    progress: Callable[[int], None] | None = None,
    damaged: set[tuple[UUID, str]] | None = None,
) -> LedgerView:
    """The read side as the log alone defines it (nothing is written).

    A text whose key is damaged is replayed as if its key were gone (its
    turn or fold without sizes), and (conversation id, key id) is added to
    `damaged`: one altered key row does not stop the replay.
    """
    noted = set() if damaged is None else damaged
    return replay_events(
        _pages(ledger, progress), open_noting_damaged(ledger.vault, noted)
    )


def rebuild_read_side(
    ledger: Conversations,
    *,
    progress: Callable[[int], None] | None = None,
    damaged: set[tuple[UUID, str]] | None = None,
) -> LedgerView:
    """Replace the read side's rows with those replayed from the log."""
    view = replay_log(ledger, progress=progress, damaged=damaged)
    recorder: Any = ledger.recorder
    recorder.replace_read_side(view)
    return view


def upgrade_if_needed(ledger: Conversations) -> bool:
    """Build the read side of a store written before it existed; True if built."""
    recorder: Any = ledger.recorder
    if recorder.read_side_is_empty() and ledger.recorder.max_notification_id():
        rebuild_read_side(ledger)
        return True
    return False


def _pages(
    ledger: Conversations, progress: Callable[[int], None] | None
) -> Iterator[Sequence[tuple[Any, str]]]:
    start = 0
    while True:
        page = ledger.recorder.select_notifications(
            start, _PAGE, inclusive_of_start=False
        )
        if not page:
            return
        decoded = []
        for notification in page:
            try:
                digest = read_link(notification).recorded_digest
            except ChainFormatError:
                digest = ""  # the audit reports it; the read side still follows
            decoded.append((ledger.mapper.to_domain_event(notification), digest))
        yield decoded
        if progress is not None:
            progress(len(page))
        start = page[-1].id
