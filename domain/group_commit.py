"""Group commit: writes from many threads saved in shared transactions.

A caller queues its write and waits. Whoever finds no commit in progress
becomes the leader: it takes every queued write (up to `max_batch`), commits
them together, and hands each caller its own result or error; callers that
arrived meanwhile form the next batch. So under load one transaction (one
lock of the event table, one fsync) carries many turns, and writes of one
conversation are applied in the order they were queued, never racing.

The batch function decides what a failure rejects; this module only moves
requests and results between threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

W = TypeVar("W")

# How long a new leader waits for the writers of the previous batch to queue
# again (only after a batch of several: a lone writer never waits).
_GATHER_SECONDS = 0.0005


class Pending(Generic[W]):
    """One queued write: its work, then its result or error."""

    __slots__ = ("work", "_result", "_error", "finished")

    def __init__(self, work: W) -> None:
        self.work = work
        self._result: Any = None
        self._error: BaseException | None = None
        self.finished = False

    def succeed(self, result: Any) -> None:
        self._result, self.finished = result, True

    def fail(self, error: BaseException) -> None:
        self._error, self.finished = error, True

    def outcome(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result


class GroupCommitter(Generic[W]):
    def __init__(
        self,
        commit_batch: Callable[[Sequence[Pending[W]]], None],
        *,
        max_batch: int = 64,
    ) -> None:
        """`commit_batch` must finish every request it is given (succeed or
        fail); anything it raises fails the requests it left unfinished."""
        self._commit_batch = commit_batch
        self._max_batch = max_batch
        self._queue: list[Pending[W]] = []
        self._leading = False
        self._last_batch = 0
        self._changed = threading.Condition()

    def submit(self, work: W) -> Any:
        """Queue `work`, wait until it is committed, return its result."""
        return self.submit_many([work])[0].outcome()

    def submit_many(self, works: Sequence[W]) -> list[Pending[W]]:
        """Queue `works` in order, wait until every one is finished."""
        requests = [Pending(work) for work in works]
        with self._changed:
            self._queue.extend(requests)
        for request in requests:
            self._wait(request)
        return requests

    def _wait(self, request: Pending[W]) -> None:
        while True:
            with self._changed:
                while not request.finished and self._leading:
                    self._changed.wait()
                if request.finished:
                    return
                self._leading = True
                gathering = len(self._queue) < self._last_batch
            if gathering:
                # Writers that were in the last batch are coming back with their
                # next write: a moment's wait lets one transaction carry them all,
                # instead of a batch of one followed by the rest.
                time.sleep(_GATHER_SECONDS)
            with self._changed:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                self._last_batch = len(batch)
            try:
                self._commit_batch(batch)
            except BaseException as error:
                for pending in batch:
                    if not pending.finished:
                        pending.fail(error)
            finally:
                with self._changed:
                    for pending in batch:
                        if not pending.finished:
                            pending.fail(RuntimeError("write left unfinished"))
                    self._leading = False
                    self._changed.notify_all()
