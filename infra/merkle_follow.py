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
The follower keeps the same discipline instead: rows and tracking position
in one transaction, resumable from the tracked position.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.domain.errors import CheckpointError
from turnledger.domain.merkle import Frontier, Node, leaf_hash, tree_fault
from turnledger.domain.transparency import RawLog, leaf_input
from turnledger.infra.merkle_ports import CountedLog, LeafStore

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


def follow(log: RawLog, store: LeafStore, *, page_size: int = FOLLOW_PAGE) -> Followed:
    """Append every row after the tree's last one, a page per transaction."""
    followed: Followed | None = None
    while True:
        with store.writing() as writer:
            size, last_id = writer.tracking()
            if followed is None or followed.frontier.size != size:
                # First page, or another follower moved the tree meanwhile.
                frontier = Frontier.load(size, writer.read_nodes)
                followed = Followed(frontier, size, [], [], last_id)
            page = log.rows(last_id, page_size)
            if not page:
                return followed
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
            writer.append(nodes, leaves, frontier.size, page[-1].notification_id)
            followed.last_id = page[-1].notification_id
        if len(page) < page_size:
            return followed


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
