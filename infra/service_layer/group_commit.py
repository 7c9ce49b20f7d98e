"""Group commit: writes from many threads saved in shared transactions.

A caller queues its write and waits. Whoever finds a free commit slot becomes
a leader: it takes the queued writes it may take (up to `max_batch`), commits
them together, and hands each caller its own result or error; callers that
arrived meanwhile form the next batch. So under load one transaction (one
lock of the event table, one fsync) carries many turns, and writes of one
conversation are applied in the order they were queued, never racing.

With `max_in_flight` above one, a second leader prepares and sends the next
batch while the first one waits for its commit: the database's wait and the
process's own work overlap instead of taking turns. Batches in flight never
share a key (a conversation): a write waits for the batch that holds its key,
so each key's writes still commit one batch after the other, in queue order.

Each waiting caller sleeps on a lock of its own and is woken once, when its
writes are finished or when it is appointed to lead the next batch: waking
every waiter at the end of every batch cost more than the batch's own work.

The batch function decides what a failure rejects; this module only moves
requests and results between threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

W = TypeVar("W")

# How long a new leader may wait for the callers of the previous batch to
# queue again (only after a batch of several callers: a lone caller never
# waits, whatever it submitted). It stops waiting as soon as they are all back.
_GATHER_SECONDS = 0.001


class _Waiter:
    """One caller: its unfinished writes, and the lock it sleeps on."""

    __slots__ = ("unfinished", "leading", "signalled", "wake")

    def __init__(self, unfinished: int) -> None:
        self.unfinished = unfinished
        self.leading = False
        self.signalled = False
        self.wake = threading.Lock()
        self.wake.acquire()


class Pending(Generic[W]):
    """One queued write: its work, then its result or error."""

    __slots__ = ("work", "_result", "_error", "finished", "waiter")

    def __init__(self, work: W, waiter: _Waiter) -> None:
        self.work = work
        self._result: Any = None
        self._error: BaseException | None = None
        self.finished = False
        self.waiter = waiter

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
        key: Callable[[W], Hashable],
        max_batch: int = 64,
        max_in_flight: int = 1,
    ) -> None:
        """`commit_batch` must finish every request it is given (succeed or
        fail); anything it raises fails the requests it left unfinished. It is
        called by at most `max_in_flight` threads at once, never with the same
        `key` in two calls at a time."""
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        self._commit_batch = commit_batch
        self._key = key
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._queue: list[Pending[W]] = []
        self._busy_keys: set[Hashable] = set()
        self._leaders = 0
        self._last_batch = 0
        self._mutex = threading.Lock()
        # A gathering leader sleeps on this until the queue holds as many
        # callers as its last batch (`_gather_target`), or its time is up.
        self._gathered = threading.Condition(self._mutex)
        self._gather_target: int | None = None

    def submit(self, work: W) -> Any:
        """Queue `work`, wait until it is committed, return its result."""
        return self.submit_many([work])[0].outcome()

    def submit_many(self, works: Sequence[W]) -> list[Pending[W]]:
        """Queue `works` in order, wait until every one is finished."""
        waiter = _Waiter(len(works))
        requests = [Pending(work, waiter) for work in works]
        if not requests:
            return requests
        with self._mutex:
            self._queue.extend(requests)
            if (
                self._gather_target is not None
                and self._queued_callers() >= self._gather_target
            ):
                self._gather_target = None
                self._gathered.notify_all()
            self._appoint(waiter)
        while True:
            if waiter.leading:
                self._lead(waiter)
            with self._mutex:
                if waiter.unfinished == 0:
                    return requests
                if waiter.leading:
                    continue
            waiter.wake.acquire()
            with self._mutex:
                waiter.signalled = False

    # The rest runs with the mutex held, but for _lead's commit.

    def _queued_callers(self) -> int:
        return len({pending.waiter for pending in self._queue})

    def _eligible(self) -> bool:
        return any(self._key(p.work) not in self._busy_keys for p in self._queue)

    def _appoint(self, preferred: _Waiter | None) -> None:
        """Fill free commit slots with leaders while there is work they may take:
        `preferred` first (it is awake already), then the callers queued first."""
        while self._leaders < self._max_in_flight and self._eligible():
            candidate = None
            if preferred is not None and preferred.unfinished and not preferred.leading:
                candidate = preferred
            else:
                for pending in self._queue:
                    if not pending.waiter.leading:
                        candidate = pending.waiter
                        break
            if candidate is None:
                return
            candidate.leading = True
            self._leaders += 1
            if candidate is not preferred:
                self._signal(candidate)

    def _signal(self, waiter: _Waiter) -> None:
        if not waiter.signalled:
            waiter.signalled = True
            waiter.wake.release()

    def _gather(self) -> None:
        """Wait, briefly, for the callers of the last batch to queue again.

        They come back with their next write as soon as they are woken: a
        moment's wait lets one transaction carry them all, instead of a batch
        of one followed by the rest. The wait ends when they are all queued
        (the last one to arrive wakes the leader) or after _GATHER_SECONDS.
        Callers, not writes: one caller that submitted several writes at once
        (a group of requests gathered elsewhere) brings no more until its
        call returns, so waiting for more of its writes would only add delay.
        """
        target = self._last_batch
        if self._queued_callers() >= target:
            return
        deadline = time.monotonic() + _GATHER_SECONDS
        while self._queued_callers() < target:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._gather_target is None or target < self._gather_target:
                self._gather_target = target
            self._gathered.wait(remaining)

    def _take_batch(self) -> list[Pending[W]]:
        """The next batch: queued writes in order, skipping every key that is in
        a batch in flight, or behind a write left in the queue."""
        batch: list[Pending[W]] = []
        left: list[Pending[W]] = []
        skipped: set[Hashable] = set()
        for pending in self._queue:
            key = self._key(pending.work)
            if (
                len(batch) < self._max_batch
                and key not in self._busy_keys
                and key not in skipped
            ):
                batch.append(pending)
            else:
                skipped.add(key)
                left.append(pending)
        self._queue = left
        self._busy_keys.update(self._key(p.work) for p in batch)
        return batch

    def _lead(self, waiter: _Waiter) -> None:
        """Run one batch as its leader (called without the mutex)."""
        with self._mutex:
            self._gather()
            batch = self._take_batch()
            self._last_batch = len({pending.waiter for pending in batch})
        try:
            if batch:
                self._commit_batch(batch)
        except BaseException as error:
            for pending in batch:
                if not pending.finished:
                    pending.fail(error)
        finally:
            with self._mutex:
                for pending in batch:
                    if not pending.finished:
                        pending.fail(RuntimeError("write left unfinished"))
                    self._busy_keys.discard(self._key(pending.work))
                    done = pending.waiter
                    done.unfinished -= 1
                    if done.unfinished == 0 and done is not waiter:
                        self._signal(done)
                waiter.leading = False
                self._leaders -= 1
                self._appoint(waiter)
