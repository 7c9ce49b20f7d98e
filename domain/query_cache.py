"""Conversations kept in memory for queries, fast-forwarded on every read.

Loading a conversation decodes its whole turn index (one entry per turn), so
on a 100,000-turn conversation loading, not choosing the window, dominates a
query. A long-running service can keep recently read conversations here: a
read then costs one query for the events newer than the cached state.

Only queries use this cache. Writes load the aggregate as before, so a
failed command can never leave a half-changed aggregate in the cache, and no
write pays for deep-copying a large cached aggregate (the library's own
aggregate cache deep-copies on every read: about 3 s for 100,000 turns).
Queries must not change what they are given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from turnledger.domain.conversation import Conversation


class QueryCache:
    def __init__(
        self,
        size: int,
        *,
        load: Callable[[UUID], Any],
        newer_events: Callable[[UUID, int], Iterable[Any]],
    ) -> None:
        self._size = size
        self._load = load
        self._newer_events = newer_events
        self._cached: OrderedDict[UUID, Conversation] = OrderedDict()
        self._locks: dict[UUID, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: UUID) -> Any:
        """The conversation at its latest version (raises what `load` raises)."""
        if self._size <= 0:
            return self._load(conversation_id)
        with self._lock:
            lock = self._locks.setdefault(conversation_id, threading.Lock())
        with lock:
            conversation = self._cached.get(conversation_id)
            if conversation is None:
                conversation = self._load(conversation_id)
                if not isinstance(conversation, Conversation):
                    return conversation
            else:
                for recorded in self._newer_events(
                    conversation_id, conversation.version
                ):
                    recorded.mutate(conversation)
            with self._lock:
                self._cached[conversation_id] = conversation
                self._cached.move_to_end(conversation_id)
                while len(self._cached) > self._size:
                    evicted, _ = self._cached.popitem(last=False)
                    self._locks.pop(evicted, None)
            return conversation
