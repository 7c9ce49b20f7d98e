"""The group committer, the one batching layer: shared transactions, per-key
order, bounded overlap; callers that wait on a thread and callers that post."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.infra.service_layer.group_commit import GroupCommitter, Pending

# (key, writer, sequence number of that writer's writes of that key)
Write = tuple[str, int, int]


class Recorder:
    """A batch function that checks the committer's promises as it runs."""

    def __init__(self, *, delay: float = 0.0, fail_keys: frozenset[str] = frozenset()):
        self.delay = delay
        self.fail_keys = fail_keys
        self.lock = threading.Lock()
        self.active_keys: set[str] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.committed: dict[str, list[tuple[int, int]]] = {}
        self.batches: list[int] = []
        self.violations: list[str] = []

    def __call__(self, batch: Sequence[Pending[Write]]) -> None:
        keys = {p.work[0] for p in batch}
        with self.lock:
            overlap = keys & self.active_keys
            if overlap:
                self.violations.append(f"keys in two batches at once: {overlap}")
            self.active_keys |= keys
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.batches.append(len(batch))
        time.sleep(self.delay)  # the database's wait: other leaders may run
        with self.lock:
            for pending in batch:
                key, writer, number = pending.work
                if key in self.fail_keys:
                    pending.fail(ValueError(key))
                    continue
                self.committed.setdefault(key, []).append((writer, number))
                pending.succeed(number)
            self.active_keys -= keys
            self.in_flight -= 1


def numbered(writer: int, keys: Sequence[str]) -> list[Write]:
    seen: dict[str, int] = {}
    works = []
    for key in keys:
        works.append((key, writer, seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return works


def run_writers(
    committer: GroupCommitter[Write],
    plans: Sequence[Sequence[str]],
    *,
    chunk: int = 1,
) -> list[list[object]]:
    """One thread per plan, submitting its keys in order, `chunk` at a time."""
    outcomes: list[list[object]] = [[] for _ in plans]
    start = threading.Barrier(len(plans))

    def writer(index: int) -> None:
        works = numbered(index, plans[index])
        start.wait()
        for first in range(0, len(works), chunk):
            for pending in committer.submit_many(works[first : first + chunk]):
                try:
                    outcomes[index].append(pending.outcome())
                except ValueError as error:
                    outcomes[index].append(error)

    # Daemons: a writer left asleep by a bug fails the test, not the exit.
    threads = [
        threading.Thread(target=writer, args=(i,), daemon=True)
        for i in range(len(plans))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a writer never returned"
    return outcomes


def committer_for(recorder: Recorder, *, in_flight: int) -> GroupCommitter[Write]:
    return GroupCommitter(
        recorder, key=lambda write: write[0], max_batch=16, max_in_flight=in_flight
    )


@settings(max_examples=25, deadline=None)
@given(
    plans=st.lists(
        st.lists(st.sampled_from("abcde"), min_size=1, max_size=12),
        min_size=1,
        max_size=6,
    ),
    in_flight=st.integers(min_value=1, max_value=3),
    chunk=st.integers(min_value=1, max_value=5),
)
def test_each_key_commits_in_order_and_never_in_two_batches_at_once(
    plans: list[list[str]], in_flight: int, chunk: int
) -> None:
    recorder = Recorder(delay=0.001)
    committer = committer_for(recorder, in_flight=in_flight)
    outcomes = run_writers(committer, plans, chunk=chunk)
    assert recorder.violations == []
    assert recorder.most_in_flight <= in_flight
    # Every write committed exactly once, and each writer's writes of a key
    # in the order it queued them (writers share keys, so they contend).
    committed = [
        (key, writer, number)
        for key, writes in recorder.committed.items()
        for writer, number in writes
    ]
    expected = [w for index, plan in enumerate(plans) for w in numbered(index, plan)]
    assert sorted(committed) == sorted(expected)
    for key, writes in recorder.committed.items():
        for writer in {w for w, _ in writes}:
            numbers = [n for w, n in writes if w == writer]
            assert numbers == sorted(numbers), (key, writer)
    # Each caller got its own writes' results back, in order.
    for index, results in enumerate(outcomes):
        assert results == [n for _, _, n in numbered(index, plans[index])]


def test_batches_overlap_up_to_the_limit_when_keys_differ() -> None:
    recorder = Recorder(delay=0.02)
    committer = committer_for(recorder, in_flight=2)
    run_writers(committer, [[key] * 5 for key in "abcdefgh"])
    assert recorder.violations == []
    assert recorder.most_in_flight == 2


def test_one_batch_at_a_time_by_default() -> None:
    recorder = Recorder(delay=0.005)
    committer = GroupCommitter(recorder, key=lambda write: write[0])
    run_writers(committer, [[key] * 5 for key in "abcd"])
    assert recorder.most_in_flight == 1


def test_concurrent_writers_share_transactions() -> None:
    recorder = Recorder(delay=0.005)
    committer = committer_for(recorder, in_flight=1)
    run_writers(committer, [[key] * 10 for key in "abcdefgh"])
    assert max(recorder.batches) > 1
    assert len(recorder.batches) < 80


def test_a_failed_write_fails_only_its_caller() -> None:
    recorder = Recorder(delay=0.001, fail_keys=frozenset({"bad"}))
    committer = committer_for(recorder, in_flight=2)
    outcomes = run_writers(committer, [["bad", "bad"], ["a", "a"], ["b"]])
    assert all(isinstance(result, ValueError) for result in outcomes[0])
    assert outcomes[1] == [0, 1]
    assert outcomes[2] == [0]


def test_an_error_raised_by_the_batch_fails_its_unfinished_writes() -> None:
    def explode(batch: Sequence[Pending[Write]]) -> None:
        batch[0].succeed("first")
        raise RuntimeError("database gone")

    committer: GroupCommitter[Write] = GroupCommitter(
        explode, key=lambda write: write[0]
    )
    results = committer.submit_many([("a", 0, 0), ("b", 0, 0)])
    assert results[0].outcome() == "first"
    with pytest.raises(RuntimeError, match="database gone"):
        results[1].outcome()
    # The committer is usable afterwards (a lone write is its batch's first).
    assert committer.submit(("c", 0, 0)) == "first"


def test_many_writes_of_one_caller_across_keys_all_finish() -> None:
    recorder = Recorder(delay=0.001)
    committer = committer_for(recorder, in_flight=2)
    works = [(key, 0, number) for number in range(20) for key in "abc"]
    results = committer.submit_many(works)
    assert [r.outcome() for r in results] == [number for _, _, number in works]
    for key in "abc":
        assert recorder.committed[key] == [(0, n) for n in range(20)]
    assert recorder.violations == []


class Interrupted(Exception):
    pass


def test_a_caller_interrupted_while_it_sleeps_stalls_no_other_caller() -> None:
    """The main thread, asleep behind a batch in flight, is interrupted (as by
    Ctrl-C). Its write stays queued: the next batch takes it with two other
    callers' writes. Had the committer appointed the interrupted caller to
    lead that batch, or left it in the chain that wakes the batch's callers,
    the two others would never return."""
    release = threading.Event()
    in_flight = threading.Event()
    committed: list[str] = []

    def commit(batch: Sequence[Pending[str]]) -> None:
        if not release.is_set():
            in_flight.set()
            release.wait(10)
        for pending in batch:
            committed.append(pending.work)
            pending.succeed(pending.work)

    committer: GroupCommitter[str] = GroupCommitter(commit, key=lambda work: work)
    first = threading.Thread(target=committer.submit, args=("first",), daemon=True)
    first.start()
    assert in_flight.wait(5)
    # Queued after the main thread's write, while the first batch commits.
    behind = [
        threading.Timer(0.05, committer.submit, args=(key,)) for key in ("b", "c")
    ]
    for timer in behind:
        timer.daemon = True
        timer.start()

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            committer.submit("interrupted")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    release.set()
    for thread in (first, *behind):
        thread.join(timeout=10)
        assert not thread.is_alive(), "a caller was never woken"
    assert committed == ["first", "interrupted", "b", "c"]
    assert committer.submit("after") == "after"


@pytest.mark.parametrize("in_flight", [1, 2])
def test_every_caller_of_a_large_batch_is_woken(in_flight: int) -> None:
    """32 callers queue while one slow batch commits; the next batch holds
    them all, and each is woken (by the one before it) and returns."""
    recorder = Recorder(delay=0.2)
    committer = committer_for(recorder, in_flight=in_flight)
    slow = threading.Thread(
        target=committer.submit, args=(("slow", 0, 0),), daemon=True
    )
    slow.start()
    time.sleep(0.05)
    outcomes = run_writers(committer, [[f"k{k}"] for k in range(32)])
    slow.join(timeout=10)
    assert outcomes == [[0]] * 32
    assert max(recorder.batches) == 16  # max_batch: two batches of 16
    assert recorder.violations == []


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        GroupCommitter(Recorder(), key=lambda write: write[0], max_in_flight=0)


def _last_batch_of(
    committer: GroupCommitter[Write], recorder: Recorder, n: int
) -> None:
    """Make the committer's last batch one of `n` thread callers: they queue
    behind a slow batch and are committed together."""
    recorder.delay = 0.3
    slow = threading.Thread(target=committer.submit, args=(("slow", -1, 0),))
    slow.start()
    time.sleep(0.1)
    callers = [
        threading.Thread(target=committer.submit, args=((f"k{k}", k, 0),))
        for k in range(n)
    ]
    for thread in callers:
        thread.start()
    for thread in (slow, *callers):
        thread.join()
    assert recorder.batches[-1] == n
    recorder.delay = 0.0
    recorder.batches.clear()


def _callers_coming_back(
    committer: GroupCommitter[Write], n: int, *, spacing: float, rounds: int
) -> None:
    """`n` writers in step, writer k `spacing * k` seconds behind the first."""
    barrier = threading.Barrier(n)

    def writer(index: int) -> None:
        for number in range(1, rounds + 1):
            barrier.wait()
            time.sleep(spacing * index)
            committer.submit((f"k{index}", index, number))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_the_leader_waits_for_the_last_batch_s_callers_and_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leader whose last batch had two callers waits for two, woken by the
    second's arrival; a lone caller's leader never waits, even when it
    submitted several writes at once. With a gathering time of 30 s, any of
    these mistakes would take minutes."""
    import turnledger.infra.service_layer.group_commit as group_commit

    monkeypatch.setattr(group_commit, "_GATHER_SECONDS", 30.0)
    recorder = Recorder()
    committer: GroupCommitter[Write] = GroupCommitter(recorder, key=lambda w: w[0])
    began = time.monotonic()
    for number in range(20):  # one writer: every batch of one, no wait
        committer.submit(("a", 0, number))
    for number in range(20):  # one caller of groups of varying size
        works = [("g", 0, 100 * number + k) for k in range(1 + number % 5)]
        assert [p.outcome() for p in committer.submit_many(works)]
    assert time.monotonic() - began < 10

    # A batch of two callers: both queue while a slow batch commits.
    _last_batch_of(committer, recorder, 2)

    # Two writers in step, the second 50 ms behind the first each round: each
    # round's leader waits for the second (whose arrival wakes it), not 30 s,
    # and the batch holds both again.
    began = time.monotonic()
    _callers_coming_back(committer, 2, spacing=0.05, rounds=10)
    assert time.monotonic() - began < 20
    assert recorder.batches == [2] * 10
    assert not recorder.violations


def test_the_leader_waits_while_callers_keep_coming_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Callers that come back one after another, each within a pause of the
    one before, make one batch even when all of them take longer than one
    pause (on a busy machine, 8 callers' Python took longer than 1 ms, and a
    batch cut at the first pause left the rest a batch of their own)."""
    import turnledger.infra.service_layer.group_commit as group_commit

    monkeypatch.setattr(group_commit, "_GATHER_SECONDS", 0.3)
    recorder = Recorder()
    committer: GroupCommitter[Write] = GroupCommitter(recorder, key=lambda w: w[0])
    _last_batch_of(committer, recorder, 3)
    # Back at 0, 0.2 and 0.4 s: the last more than a pause after the first.
    _callers_coming_back(committer, 3, spacing=0.2, rounds=4)
    assert recorder.batches == [3] * 4
    assert not recorder.violations


def test_the_leader_waits_for_callers_coming_back_no_longer_than_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Callers that keep trickling back hold a batch for at most
    `_GATHER_PAUSES` pauses: with a pause of 0.4 s (a limit of 0.8 s) and ten
    callers 0.25 s apart, the first batch of a round closes before the last
    of them (at 2.25 s) is back, and after the third (at 0.5 s)."""
    import turnledger.infra.service_layer.group_commit as group_commit

    monkeypatch.setattr(group_commit, "_GATHER_SECONDS", 0.4)
    assert 0.5 < group_commit._GATHER_PAUSES * 0.4 < 9 * 0.25
    recorder = Recorder()
    committer: GroupCommitter[Write] = GroupCommitter(recorder, key=lambda w: w[0])
    _last_batch_of(committer, recorder, 10)
    _callers_coming_back(committer, 10, spacing=0.25, rounds=1)
    assert 3 <= recorder.batches[0] < 10
    assert sum(recorder.batches) == 10
    assert not recorder.violations


# A poster: a caller that does not wait on a thread (the HTTP service's event
# loop). Its items are writes once `prepare` has made them.


class LoopPoster:
    """Lends one thread of its own; records each delivery (one per batch)."""

    def __init__(self, *, refuse: frozenset[str] = frozenset()) -> None:
        self.refuse = refuse
        self.pool = ThreadPoolExecutor(1)
        self.lock = threading.Lock()
        self.deliveries: list[list[tuple[Write, object]]] = []
        self.prepared: list[int] = []
        self.delivered = threading.Condition(self.lock)
        self.lent_threads: set[str] = set()

    def lend(self, lead: Callable[[], None]) -> None:
        def run() -> None:
            self.lent_threads.add(threading.current_thread().name)
            lead()

        self.pool.submit(run)

    def prepare(self, requests: Sequence[Pending[Write]]) -> None:
        self.prepared.append(len(requests))
        for pending in requests:
            if pending.posted[0] in self.refuse:
                pending.fail(LookupError(pending.posted[0]))
            else:
                pending.work = pending.posted

    def deliver(self, requests: Sequence[Pending[Write]]) -> None:
        outcomes: list[tuple[Write, object]] = []
        for pending in requests:
            try:
                outcomes.append((pending.posted, pending.outcome()))
            except Exception as error:
                outcomes.append((pending.posted, error))
        with self.lock:
            self.deliveries.append(outcomes)
            self.delivered.notify_all()

    def outcomes(self) -> list[tuple[Write, object]]:
        return [outcome for batch in self.deliveries for outcome in batch]

    def wait_for(self, count: int) -> list[tuple[Write, object]]:
        with self.lock:
            assert self.delivered.wait_for(
                lambda: len(self.outcomes()) >= count, timeout=30
            ), "a posted write was never delivered"
        return self.outcomes()


def post_all(
    committer: GroupCommitter[Write], poster: LoopPoster, works: Sequence[Write]
) -> None:
    committer.post(poster, [(work[0], work) for work in works])


@settings(max_examples=25, deadline=None)
@given(
    plans=st.lists(
        st.lists(st.sampled_from("abcde"), min_size=1, max_size=10),
        min_size=1,
        max_size=4,
    ),
    posted=st.lists(st.sampled_from("abcde"), min_size=1, max_size=20),
    in_flight=st.integers(min_value=1, max_value=3),
)
def test_posted_and_waited_writes_share_one_queue_and_keep_each_key_s_order(
    plans: list[list[str]], posted: list[str], in_flight: int
) -> None:
    """Threads waiting on their locks and a poster posting one write at a time
    (as an event loop does) go through the same queue: each key's writes
    commit in the order they were queued, never in two batches at once, and
    every posted write is delivered exactly once with its own result."""
    recorder = Recorder(delay=0.001)
    committer = committer_for(recorder, in_flight=in_flight)
    poster = LoopPoster()
    mine = numbered(len(plans), posted)  # the poster is writer len(plans)

    def loop() -> None:
        for work in mine:
            post_all(committer, poster, [work])
            time.sleep(0.0005)

    looping = threading.Thread(target=loop)
    looping.start()
    outcomes = run_writers(committer, plans)
    looping.join()
    delivered = poster.wait_for(len(mine))
    assert recorder.violations == []
    assert recorder.most_in_flight <= in_flight
    assert sorted(work for work, _ in delivered) == sorted(mine)
    assert all(result == work[2] for work, result in delivered)
    for index, results in enumerate(outcomes):
        assert results == [n for _, _, n in numbered(index, plans[index])]
    for key, writes in recorder.committed.items():
        for writer in {w for w, _ in writes}:
            numbers = [n for w, n in writes if w == writer]
            assert numbers == sorted(numbers), (key, writer)


def test_a_lone_posted_write_is_led_at_once_by_the_poster_s_thread() -> None:
    recorder = Recorder()
    committer = committer_for(recorder, in_flight=1)
    poster = LoopPoster()
    post_all(committer, poster, [("a", 0, 0)])
    assert poster.wait_for(1) == [(("a", 0, 0), 0)]
    assert len(poster.lent_threads) == 1


def test_posted_writes_arriving_meanwhile_form_the_next_batch_delivered_once() -> None:
    """One lent leader at a time: what is posted while a batch commits waits
    for it, then goes as one batch, prepared and delivered in one call each."""
    recorder = Recorder(delay=0.3)
    committer = committer_for(recorder, in_flight=1)
    poster = LoopPoster()
    post_all(committer, poster, [("first", 0, 0)])
    time.sleep(0.1)
    for number in range(5):
        post_all(committer, poster, [(f"k{number}", 0, 0)])
    poster.wait_for(6)
    assert recorder.batches == [1, 5]
    assert poster.prepared == [1, 5]
    assert [len(batch) for batch in poster.deliveries] == [1, 5]


def test_a_refused_posted_write_fails_alone_and_a_failed_prepare_its_poster_s() -> None:
    recorder = Recorder(delay=0.2)
    committer = committer_for(recorder, in_flight=1)
    poster = LoopPoster(refuse=frozenset({"bad"}))
    post_all(committer, poster, [("bad", 0, 0), ("a", 0, 0)])
    delivered = dict(poster.wait_for(2))
    assert isinstance(delivered[("bad", 0, 0)], LookupError)
    assert delivered[("a", 0, 0)] == 0

    # A prepare that raises (the token lookup's database is gone) fails the
    # poster's requests of that batch, not a thread caller's in it.
    broken = LoopPoster()

    def no_database(requests: Sequence[Pending[Write]]) -> None:
        raise ConnectionError("database gone")

    broken.prepare = no_database  # type: ignore[method-assign]
    slow = threading.Thread(target=committer.submit, args=(("slow", 0, 0),))
    slow.start()
    time.sleep(0.05)  # both queue behind the slow batch: one batch together
    post_all(committer, broken, [("p", 0, 0)])
    assert committer.submit(("t", 1, 0)) == 0
    slow.join()
    [(_, error)] = broken.wait_for(1)
    assert isinstance(error, ConnectionError)
    assert recorder.committed["t"] == [(1, 0)] and "p" not in recorder.committed


def test_a_poster_without_threads_gets_its_writes_back_failed() -> None:
    """At shutdown the service's write pool is gone: what it posts fails at
    once with the pool's error, and the committer stays usable."""
    recorder = Recorder()
    committer = committer_for(recorder, in_flight=1)
    poster = LoopPoster()
    poster.pool.shutdown()
    post_all(committer, poster, [("a", 0, 0), ("b", 0, 0)])
    assert [type(error) for _, error in poster.outcomes()] == [RuntimeError] * 2
    assert recorder.committed == {}
    assert committer.submit(("c", 0, 0)) == 0


def test_the_leader_never_waits_for_posted_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A poster's requests come back over the network, not when a leader wakes
    them: a batch of many posted writes leaves no gathering wait behind it."""
    import turnledger.infra.service_layer.group_commit as group_commit

    monkeypatch.setattr(group_commit, "_GATHER_SECONDS", 30.0)
    recorder = Recorder(delay=0.05)
    committer = committer_for(recorder, in_flight=1)
    poster = LoopPoster()
    began = time.monotonic()
    post_all(committer, poster, [("first", 0, 0)])
    time.sleep(0.01)
    post_all(committer, poster, [(f"k{n}", 0, 0) for n in range(8)])
    poster.wait_for(9)
    for round_ in range(1, 6):
        post_all(committer, poster, [(f"k{round_}", 0, round_)])
        poster.wait_for(9 + round_)
    assert time.monotonic() - began < 10
