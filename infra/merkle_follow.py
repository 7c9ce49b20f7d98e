"""The follower of the transparency log's tree.

A follower reads the rows after the last notification id it has seen, turns
each into its leaf and appends it to the tree, storing every complete subtree
it completes (`merkle_nodes`), each leaf's input (`merkle_leaves`: what a
finding names) and its position (`merkle_tracking`) in one transaction per
page, so a crash leaves the tree at a page boundary, never half a page.
Appending k leaves costs O(k log n) hashes; a proof reads O(log n) nodes.

Why not the library's `Projection` with a `TrackingRecorder`: a projection
receives decoded domain events, and a leaf must be the row's raw cells (a row
that does not decode, or that the recorder would skip, still needs its leaf).
It is a `Follower` (infra/log_follow.py) instead, over the raw rows, with the
same discipline: rows and tracking position in one transaction, resumable
from the tracked position. The tracked position is never trusted on its
own: `follow_checked` counts the rows it claims to cover.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from turnledger.domain.errors import CheckpointError
from turnledger.domain.merkle import Frontier, Node, leaf_hash, tree_fault
from turnledger.domain.transparency import RawLog, RawRow, leaf_input
from turnledger.infra.log_follow import Follower, Page, PageReader
from turnledger.infra.merkle_ports import CountedLog, LeafStore, TreeWriter

FOLLOW_PAGE = 5000


class LogInconsistentError(CheckpointError):
    """Raised when the log no longer extends the newest checkpoint in a directory,
    or the tree cache contradicts the log or itself (so nothing is signed)."""


@dataclass(slots=True)
class Followed:
    """Where a follow left the tree, and the leaf hashes (and inputs) it appended."""

    frontier: Frontier
    first_new: int
    new_leaves: list[bytes]
    new_inputs: list[bytes]
    last_id: int | None = None


class _TreeFollow:
    """The tree as a `Follower`'s position and handler: its tracking row (size,
    last notification id) is the position, a page's nodes and leaves are what
    the handler writes, in the leaf store's transaction."""

    def __init__(self, store: LeafStore) -> None:
        self._store = store
        self.followed: Followed | None = None

    def transaction(self) -> AbstractContextManager[TreeWriter]:
        writing: AbstractContextManager[TreeWriter] = self._store.writing()
        return writing

    def get(self, writer: TreeWriter) -> int | None:
        size, last_id = writer.tracking()
        if self.followed is None or self.followed.frontier.size != size:
            # First page, or another follower moved the tree meanwhile.
            frontier = Frontier.load(size, writer.read_nodes)
            self.followed = Followed(frontier, size, [], [], last_id)
        return last_id

    def append(self, writer: TreeWriter, page: Sequence[RawRow]) -> None:
        assert self.followed is not None  # `get` ran first, in this transaction
        followed = self.followed
        frontier = followed.frontier
        nodes: list[Node] = []
        leaves: list[tuple[int, int, bytes, bytes]] = []
        for row in page:
            data = leaf_input(row)
            leaf = leaf_hash(data)
            leaves.append((frontier.size, row.notification_id, data, leaf))
            followed.new_leaves.append(leaf)
            followed.new_inputs.append(data)
            # Leaf hashes are kept with their leaves: nodes from level 1.
            nodes.extend(frontier.append(leaf)[1:])
        writer.append(nodes, leaves)

    def set(self, writer: TreeWriter, position: int) -> None:
        assert self.followed is not None
        writer.track(self.followed.frontier.size, position)
        self.followed.last_id = position


def _raw_pages(log: RawLog) -> PageReader[RawRow]:
    def read(after: int | None, limit: int) -> Page[RawRow]:
        rows = log.rows(after, limit)
        return Page(rows, rows[-1].notification_id if rows else None)

    return read


def follow(log: RawLog, store: LeafStore, *, page_size: int = FOLLOW_PAGE) -> Followed:
    """Append every row after the tree's last one, a page per transaction."""
    tree = _TreeFollow(store)
    Follower(
        position=tree,
        read_page=_raw_pages(log),
        handle=tree.append,
        page_size=page_size,
    ).run()
    assert tree.followed is not None  # the position is read at least once
    return tree.followed


def follow_checked(log: CountedLog, store: LeafStore) -> Followed:
    """`follow`, then check the tree against the log itself and against itself.

    The tree cache lives where the DBA can write: its tracking row could skip
    rows (which no checkpoint would then cover, and whose deletion no audit
    would see), a node could be altered that only a later proof reads. So the
    rows at or below the last one followed must be exactly the tree's leaves
    in number, and every stored node must be the hash of its children.
    Costs one count of the rows and one hash per leaf (docs/benchmarks.md).
    """
    followed = follow(log, store)
    size = followed.frontier.size
    stored = log.count_through(followed.last_id)
    if stored != size:
        raise LogInconsistentError(
            f"the log holds {stored} rows up to notification id {followed.last_id}, "
            f"the tree cache covers {size}: the cache (merkle_tracking) was altered "
            "and would leave rows uncovered; nothing was signed (drop the three "
            "merkle tables and they are rebuilt from the rows)"
        )
    fault = tree_fault(size, store.level_nodes)
    if fault is not None:
        raise LogInconsistentError(
            f"the tree cache was altered: {fault}; nothing was signed (run "
            "`turnledger audit --checkpoint DIR`; if it passes, only the cache was "
            "altered: drop the three merkle tables and they are rebuilt from the "
            "rows)"
        )
    return followed
