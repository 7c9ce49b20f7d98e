"""The conversation index: who owns which conversation, at which version.

A read model folded from the event log. Each conversation's row holds its
owner, its latest version and the chain digest of its latest event, so the
owner's conversations can be listed without scanning the log, and an audit
has an independent record of each conversation's head. The fold is pure: the
infra adapter reads the log, calls `fold_page`, and writes the result with its
tracking position in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """What the index needs from one event of the log."""

    conversation_id: UUID
    version: int
    head_digest: str
    owner_id: str | None = None  # only a conversation's first event names it


@dataclass(frozen=True, slots=True)
class IndexChange:
    """The net effect of a page of events on one conversation's row.

    With `owner_id` the row is (re)written whole; without it only the version
    and head move forward, and only if the row exists.
    """

    conversation_id: UUID
    version: int
    head_digest: str
    owner_id: str | None = None


def fold_page(events: Iterable[LoggedEvent]) -> list[IndexChange]:
    """Collapse a page of events, in log order, into one change per conversation."""
    changes: dict[UUID, IndexChange] = {}
    for event in events:
        before = changes.get(event.conversation_id)
        owner_id = (
            event.owner_id
            if event.owner_id is not None
            else (before.owner_id if before is not None else None)
        )
        if before is not None and before.version > event.version:
            continue
        changes[event.conversation_id] = IndexChange(
            conversation_id=event.conversation_id,
            version=event.version,
            head_digest=event.head_digest,
            owner_id=owner_id,
        )
    return list(changes.values())
