"""The parties of the group committer (group_commit.py): a thread caller
waiting for its writes (`Waiter`), a caller that posts instead (`Poster`),
and one queued write with its outcome (`Pending`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, Protocol, TypeVar

W = TypeVar("W")


class Poster(Protocol[W]):
    """A caller that does not wait on a thread of its own (`post`)."""

    def lend(self, lead: Callable[[], None]) -> None:
        """Run `lead` on a thread of the poster's (RuntimeError: it has none
        any more; its queued writes then fail with that error)."""

    def prepare(self, requests: Sequence[Pending[W]]) -> None:
        """On the leader's thread, once per batch: make each request's `work`
        from its `posted` item, or fail it. What it raises fails them all."""

    def deliver(self, requests: Sequence[Pending[W]]) -> None:
        """On the leader's thread, once per batch: the poster's finished
        requests. Must not raise."""


class Waiter:
    """A thread caller (its unfinished writes, the lock it sleeps on), or a
    poster's lent thread (`lent`: it has no writes, and leads while it may)."""

    __slots__ = (
        "unfinished",
        "leading",
        "signalled",
        "wake",
        "lent",
        "wakes_next",
        "gone",
    )

    def __init__(self, unfinished: int, lent: Poster[Any] | None = None) -> None:
        self.unfinished = unfinished
        self.leading = False
        self.signalled = False
        self.lent = lent
        # The caller of the same finished batch that this one wakes as soon
        # as it is awake itself (GroupCommitter._finish).
        self.wakes_next: Waiter | None = None
        # Left `submit_many` by an exception (an interrupt while it slept, an
        # error while it led): never appointed, never asked to wake another.
        self.gone = False
        self.wake = threading.Lock()
        self.wake.acquire()


class Pending(Generic[W]):
    """One queued write: its key, its work, then its result or error. A
    posted write carries its poster's item (`posted`) until `prepare` makes
    its work."""

    __slots__ = (
        "work",
        "key",
        "waiter",
        "poster",
        "posted",
        "_result",
        "_error",
        "finished",
    )

    def __init__(
        self,
        work: W,
        key: Hashable,
        waiter: Waiter | None,
        poster: Poster[W] | None = None,
        posted: Any = None,
    ) -> None:
        self.work = work
        self.key = key
        self.waiter = waiter
        self.poster = poster
        self.posted = posted
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
