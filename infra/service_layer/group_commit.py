"""Group commit, the one batching layer: writes of many callers saved in
shared transactions.

Callers queue writes; a leader takes the queued writes it may take (up to
`max_batch`), commits them together, and hands each write its own result or
error; writes queued meanwhile form the next batch. So under load one
transaction (one lock of the event table, one fsync) carries many turns,
and writes of one conversation (one key) are applied in the order they were
queued, never racing.

Two ways to wait, one queue:

- **A thread** (`submit`, `submit_many`: the Python API) sleeps on a lock of
  its own and is woken once, when its writes are finished or when it is
  appointed to lead the next batch: waking every waiter at the end of every
  batch cost more than the batch's own work. The callers of a finished batch
  are woken in a chain, each by the one before (`_finish`). A caller that
  leaves by an exception (an interrupt while it sleeps) is passed over from
  then on; its writes are still committed by other leaders.
- **A poster** (`post`: the HTTP service's event loop, which must never
  block) queues writes and returns at once. It lends the committer a thread
  of its own to lead when a batch must start and no thread caller is
  waiting: a lone request is sent at once, and that thread takes the next
  batch itself, as long as there is one, rather than wait to be handed it
  (the hand-over was a fifth of each batch's cycle, docs/benchmarks.md,
  issue 12). Whoever leads, a batch meets each poster twice: `prepare` makes
  the poster's writes of the batch at once (one token lookup for all its
  requests), and `deliver` hands their outcomes back at once (one hop to the
  event loop a batch, not a request). A poster has at most one lent leader.

With `max_in_flight` above one, a second leader prepares and sends the next
batch while the first one waits for its commit. Batches in flight never
share a key: a write waits for the batch that holds its key, so each key's
writes still commit one batch after the other, in queue order. One batch at
a time is the default and what the service uses: with two, a write arriving
while a batch commits went alone, as a transaction of its own (8 HTTP
devices: 1,220-1,350 turns/s with two against 1,530-1,680 with one).

The batch function decides what a failure rejects; this module only moves
writes and outcomes between threads.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar, cast

from turnledger.infra.service_layer.commit_parties import Pending, Poster, Waiter

__all__ = ["GroupCommitter", "Pending", "Poster"]

W = TypeVar("W")

_log = logging.getLogger(__name__)

# How long a new leader waits for the next of the previous batch's thread
# callers to queue again: it stops as soon as they are all back, or when none
# has come back for this long, or after _GATHER_PAUSES times this in all.
_GATHER_SECONDS = 0.001
_GATHER_PAUSES = 2


# Per poster, its requests to hand back (after a batch, or a refused lend).
_Deliveries = dict[Any, list[Pending[Any]]]


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
        key in two calls at a time."""
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
        self._lending: set[Any] = set()  # posters with a lent leader
        self._wake_order = random.Random()  # _finish's chain; under the mutex
        self._mutex = threading.Lock()
        # A gathering leader sleeps on this until the queue holds as many
        # thread callers as its last batch (`_gather_target`), or its time is up.
        self._gathered = threading.Condition(self._mutex)
        self._gather_target: int | None = None

    def submit(self, work: W) -> Any:
        """Queue `work`, wait until it is committed, return its result."""
        return self.submit_many([work])[0].outcome()

    def submit_many(self, works: Sequence[W]) -> list[Pending[W]]:
        """Queue `works` in order, wait on this thread until every one is
        finished."""
        waiter = Waiter(len(works))
        requests = [Pending(work, self._key(work), waiter) for work in works]
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
        try:
            self._wait(waiter)
        except BaseException:
            with self._mutex:
                refused = self._abandon(waiter)
            _deliver(refused)
            raise
        return requests

    def _wait(self, waiter: Waiter) -> None:
        """Lead when appointed, sleep otherwise, until the writes are finished."""
        while True:
            if waiter.leading:
                self._lead(waiter)
            with self._mutex:
                if waiter.unfinished == 0:
                    self._wake_next(waiter)
                    return
                if waiter.leading:
                    continue
            waiter.wake.acquire()
            with self._mutex:
                waiter.signalled = False
                self._wake_next(waiter)

    def post(self, poster: Poster[W], items: Sequence[tuple[Hashable, Any]]) -> None:
        """Queue a write per (key, item) for `poster` and return at once; the
        batch that takes them prepares them and delivers their outcomes
        through `poster`. Callable from any thread, an event loop's too."""
        requests = [
            Pending(cast(W, None), key, None, poster, item) for key, item in items
        ]
        with self._mutex:
            self._queue.extend(requests)
            refused = self._appoint(None)
        _deliver(refused)

    # The rest runs with the mutex held, but for _lead's batch.

    def _queued_callers(self) -> int:
        return len({p.waiter for p in self._queue if p.waiter is not None})

    def _eligible(self) -> bool:
        return any(pending.key not in self._busy_keys for pending in self._queue)

    def _appoint(self, preferred: Waiter | None) -> _Deliveries:
        """Fill free commit slots with leaders while there is work they may
        take: `preferred` first (it is awake already), then, in queue order,
        waiting thread callers and posters without a lent leader. Returns
        the requests of posters that could not lend a thread, failed."""
        refused: _Deliveries = {}
        while self._leaders < self._max_in_flight and self._eligible():
            if (
                preferred is not None
                and not preferred.leading
                and (preferred.unfinished or preferred.lent is not None)
            ):
                preferred.leading = True
                self._leaders += 1
                continue
            candidate = self._next_leader()
            if candidate is None:
                return refused
            if isinstance(candidate, Waiter):
                candidate.leading = True
                self._leaders += 1
                self._signal(candidate)
            else:
                self._lend(candidate, refused)
        return refused

    def _next_leader(self) -> Waiter | Poster[W] | None:
        """The first queued thread caller not leading (nor gone), or poster not
        lending."""
        for pending in self._queue:
            waiter = pending.waiter
            if waiter is not None:
                if not waiter.leading and not waiter.gone:
                    return waiter
            elif pending.poster not in self._lending:
                return pending.poster
        return None

    def _lend(self, poster: Poster[W], refused: _Deliveries) -> None:
        lent = Waiter(0, lent=poster)
        lent.leading = True
        self._leaders += 1
        self._lending.add(poster)
        try:
            poster.lend(lambda: self._lead_lent(lent))
        except RuntimeError as error:  # the poster's threads are gone: stopping
            lent.leading = False
            self._leaders -= 1
            self._lending.discard(poster)
            mine = [p for p in self._queue if p.poster is poster]
            self._queue = [p for p in self._queue if p.poster is not poster]
            for pending in mine:
                pending.fail(error)
            refused.setdefault(poster, []).extend(mine)

    def _wake_next(self, waiter: Waiter) -> None:
        following, waiter.wakes_next = waiter.wakes_next, None
        if following is not None:
            self._signal(following)

    def _abandon(self, waiter: Waiter) -> _Deliveries:
        """A caller leaving by an exception: its writes stay queued or in
        flight for other leaders, but it leads and wakes no one any more."""
        waiter.gone = True
        self._wake_next(waiter)
        if not waiter.leading:
            return {}
        waiter.leading = False
        self._leaders -= 1
        return self._appoint(None)

    def _signal(self, waiter: Waiter) -> None:
        if not waiter.signalled:
            waiter.signalled = True
            waiter.wake.release()

    def _gather(self) -> None:
        """Wait, briefly, for the thread callers of the last batch to queue again.

        They come back with their next write as soon as they are woken: a
        moment's wait lets one transaction carry them all, instead of a batch
        of one followed by the rest (8 threads: batches of 7.3 turns instead
        of 6.5). The wait ends when they are all queued (the last one to
        arrive wakes the leader), when a pause of _GATHER_SECONDS brought none
        back, or after _GATHER_PAUSES pauses in all. It counts callers
        that a leader woke: a thread that submitted several writes at once
        comes back with one call, and a poster's requests come back over the
        network after their answers, not when woken (waiting for them turned
        1/7 splits into 4/4 batches for no gain, docs/benchmarks.md, issue 12).
        """
        target = self._last_batch
        queued = self._queued_callers()
        if queued >= target:
            return
        started = time.monotonic()
        limit = started + _GATHER_PAUSES * _GATHER_SECONDS
        deadline = started + _GATHER_SECONDS
        while queued < target:
            remaining = min(deadline, limit) - time.monotonic()
            if remaining <= 0:
                break
            if self._gather_target is None or target < self._gather_target:
                self._gather_target = target
            self._gathered.wait(remaining)
            back = self._queued_callers()
            if back > queued:
                # Still coming back. On a busy machine 8 callers' Python took
                # longer than one pause, and a batch cut at the first pause
                # left the rest a batch (and a fsync) of their own: a third
                # to a half of 8 writers' batches held all 8, against nine in
                # ten waiting on. Two pauses at most: longer ones made the
                # 16 writers of one conversation batches of 16, whose turn-id
                # indexes filled their pages less (docs/benchmarks.md, "Writes
                # to many conversations in one batch").
                queued = back
                deadline = time.monotonic() + _GATHER_SECONDS

    def _take_batch(self) -> list[Pending[W]]:
        """The next batch: queued writes in order, skipping every key that is in
        a batch in flight, or behind a write left in the queue."""
        batch: list[Pending[W]] = []
        left: list[Pending[W]] = []
        skipped: set[Hashable] = set()
        for pending in self._queue:
            key = pending.key
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
        self._busy_keys.update(pending.key for pending in batch)
        return batch

    def _lead_lent(self, lent: Waiter) -> None:
        """A poster's thread: lead batches while appointed again."""
        while True:
            self._lead(lent)
            with self._mutex:
                if not lent.leading:
                    return

    def _lead(self, waiter: Waiter) -> None:
        """Run one batch as its leader (called without the mutex)."""
        with self._mutex:
            self._gather()
            batch = self._take_batch()
            self._last_batch = len({p.waiter for p in batch if p.waiter is not None})
        try:
            ready = _prepared(batch)
            if ready:
                self._commit_batch(ready)
        except BaseException as error:
            for pending in batch:
                if not pending.finished:
                    pending.fail(error)
        finally:
            with self._mutex:
                delivered = self._finish(batch, waiter)
                waiter.leading = False
                self._leaders -= 1
                refused = self._appoint(waiter)
                if waiter.lent is not None and not waiter.leading:
                    self._lending.discard(waiter.lent)
            _deliver(delivered)
            _deliver(refused)

    def _finish(self, batch: Sequence[Pending[W]], leader: Waiter) -> _Deliveries:
        """Free the batch's keys, wake its thread callers whose writes are all
        finished (but the leader); return the posters' requests to deliver.

        Only the first is woken here; each, once awake, wakes the next
        (`_wait`), so one wakes while the one before it runs. Woken all at
        once, they woke together only to queue again for the GIL, one after
        the other, each wake-up on the critical path: 8 writers against raw
        INSERT+COMMIT, median of 20 alternating rounds, 0.585 against 0.552
        (docs/benchmarks.md, "Writes to many conversations in one batch").
        """
        delivered: _Deliveries = {}
        woken: list[Waiter] = []
        for pending in batch:
            if not pending.finished:
                pending.fail(RuntimeError("write left unfinished"))
            self._busy_keys.discard(pending.key)
            done = pending.waiter
            if done is None:
                delivered.setdefault(pending.poster, []).append(pending)
                continue
            done.unfinished -= 1
            if done.unfinished == 0 and done is not leader and not done.gone:
                if done.leading:  # awake, leading a batch in flight: sees it then
                    self._signal(done)
                else:
                    woken.append(done)
        # In a fixed order, the callers would queue their next writes in a
        # fixed order too; written in that order, the turn-id indexes filled
        # their pages less (22 more bytes a turn in bench/read_side_bench.py's
        # build). Woken all at once, they came back in no set order.
        self._wake_order.shuffle(woken)
        for done, following in zip(woken, woken[1:], strict=False):
            done.wakes_next = following
        if woken:
            self._signal(woken[0])
        return delivered


def _prepared(batch: Sequence[Pending[W]]) -> list[Pending[W]]:
    """The batch once each poster has made its writes: those not refused."""
    posted: _Deliveries = {}
    for pending in batch:
        if pending.waiter is None:
            posted.setdefault(pending.poster, []).append(pending)
    for poster, requests in posted.items():
        try:
            poster.prepare(requests)
        except Exception as error:  # the poster's whole group: e.g. no database
            for pending in requests:
                if not pending.finished:
                    pending.fail(error)
    return [pending for pending in batch if not pending.finished]


def _deliver(deliveries: _Deliveries) -> None:
    for poster, requests in deliveries.items():
        try:
            poster.deliver(requests)
        except Exception:  # never the leader's own caller's error
            _log.exception("a poster failed to take its outcomes")
