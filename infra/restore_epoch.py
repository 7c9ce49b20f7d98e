"""The cursor epoch a store is in (infra/http/cursor.py), kept in its key
store's metadata, and what the sync route asks of the restore check: whether
a cursor's position must first be made durable beside the deletion record,
and which epoch cursors are issued in."""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

import orjson

from turnledger.infra.http.cursor import INITIAL_EPOCH, CursorEpoch
from turnledger.infra.keystore import KeyStore

if TYPE_CHECKING:  # the ledger keeps the report its opening made
    from turnledger.infra.restore_report import RestoreReport
    from turnledger.infra.service_layer.application import Conversations

_log = logging.getLogger(__name__)

# The key store's metadata holding the cursor epoch (JSON: current, previous,
# head).
EPOCH_META = "cursor_epoch"


def read_cursor_epoch(store: KeyStore) -> CursorEpoch:
    """The store's cursor epoch (epoch 0 if it was never found restored)."""
    value = store.read_meta(EPOCH_META)
    if value is None:
        return INITIAL_EPOCH
    try:
        fields = orjson.loads(value)
        return CursorEpoch(
            current=_epoch_number(fields["current"]),
            previous=_epoch_number(fields["previous"]),
            head=_epoch_number(fields["head"]),
        )
    except (ValueError, KeyError, TypeError):
        # Unreadable: refuse every cursor from an epoch it cannot vouch for.
        _log.warning("turnledger: WARNING: the cursor epoch is unreadable")
        return CursorEpoch(current=_new_epoch(), previous=0, head=0)


def next_cursor_epoch(epoch: CursorEpoch, log_head: int) -> CursorEpoch:
    """The epoch after a restore whose log ended at `log_head`. Random, not
    counted: restoring the same backup twice must not bring back an epoch
    whose cursors the first restore's log issued."""
    return CursorEpoch(current=_new_epoch(), previous=epoch.current, head=log_head)


def write_cursor_epoch(store: KeyStore, epoch: CursorEpoch) -> None:
    store.write_meta(
        EPOCH_META,
        orjson.dumps(
            {"current": epoch.current, "previous": epoch.previous, "head": epoch.head}
        ).decode(),
    )


def mark_served(ledger: Conversations, position: int) -> bool:
    """Whether a cursor at `position` must first advance the mark kept beside
    the deletion record (`advance_served`, off the event loop: it fsyncs)."""
    report: RestoreReport | None = ledger.restore_report
    return (
        report is not None
        and report.log_seen is not None
        and (report.log_seen.needs(position))
    )


def advance_served(ledger: Conversations, position: int) -> None:
    """Make `position` durable beside the record before a cursor names it."""
    report: RestoreReport | None = ledger.restore_report
    if report is not None and report.log_seen is not None:
        report.log_seen.advance(position)


def epoch_of(ledger: Conversations) -> CursorEpoch:
    """The cursor epoch the opening of `ledger` found or began."""
    report: RestoreReport | None = ledger.restore_report
    return INITIAL_EPOCH if report is None else report.cursor_epoch


def _new_epoch() -> int:
    return 1 + secrets.randbelow(2**64 - 1)


def _epoch_number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    if not 0 <= value < 2**64:
        raise ValueError(value)
    return value
