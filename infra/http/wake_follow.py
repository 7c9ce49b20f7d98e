"""The long-polls' follower of the log on SQLite and memory: the owners of the
events committed since the last look (PostgreSQL names them in its NOTIFY).

A `Follower` (infra/log_follow.py) whose position lives in the process and
starts at the log's head the first time it is read: a service that starts
wakes nobody for what was written before it, and long-polls read from their
own cursors anyway. A page's owners are read in one query of the read side.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from eventsourcing.persistence import Notification

from turnledger.infra.log_follow import Follower, MemoryPosition, NotificationReader
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed

_LOG_PAGE = 500


class LogFollower:
    """The owners of the events committed since the last look."""

    def __init__(self, ledger: Conversations, feed: ConversationFeed) -> None:
        self._ledger = ledger
        self._owners: set[str] = set()
        self._follower = Follower(
            position=MemoryPosition(feed.head_position),
            read_page=NotificationReader(ledger.recorder),
            handle=self._collect,
            page_size=_LOG_PAGE,
        )

    def changed_owners(self) -> set[str]:
        self._owners = set()
        self._follower.run()
        owners, self._owners = self._owners, set()
        return owners

    def _collect(self, transaction: None, page: Sequence[Notification]) -> None:
        # One read of the owners for the whole page.
        rows = self._ledger.read_side.conversations(
            {_as_uuid(n.originator_id) for n in page}
        )
        self._owners.update(row.owner_id for row in rows.values())


def _as_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
