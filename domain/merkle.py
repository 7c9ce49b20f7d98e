"""An RFC 6962 Merkle tree: roots, inclusion and consistency proofs, verifiers.

Pure: no I/O. Hashes are SHA-256 with the RFC's domain separation, a leaf
as SHA-256(0x00 || leaf) and an interior node as SHA-256(0x01 || left || right),
so a leaf can never pass for a node. The tree over n leaves splits at the
largest power of two below n (RFC 6962 section 2.1).

Stored trees keep every *complete* subtree: the node at (level, index) covers
leaves [index * 2**level, (index + 1) * 2**level). Every hash a proof needs is
either such a node or a right edge built from a few of them, so a proof reads
O(log n) nodes. `Frontier` keeps only the complete subtrees of the current
size (one per set bit of n): appending k leaves costs O(k log n) hashes and
returns the new complete nodes for the caller to store.

The verifiers follow RFC 9162 sections 2.1.3.2 and 2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

Coordinate = tuple[int, int]
"""(level, index) of a complete subtree; level 0 is a leaf hash."""

NodeReader = Callable[[Sequence[Coordinate]], Sequence[bytes]]
"""Returns the hashes of the complete subtrees asked for, in the order asked."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the tree with no leaves (RFC 6962: the hash of the empty string)."""


class ProofError(ValueError):
    """Raised when a proof is asked for positions the tree does not have."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two strictly below `size` (size >= 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def range_nodes(start: int, end: int) -> list[Coordinate]:
    """The complete subtrees that make up leaves [start, end), left to right.

    Valid for the ranges RFC 6962's recursion produces (start aligned to a
    power of two at least end - start), whose hash is these nodes folded
    from the right.
    """
    nodes: list[Coordinate] = []
    while start < end:
        level = (end - start).bit_length() - 1
        while start % (1 << level):
            level -= 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a range from its complete subtrees' hashes, left to right."""
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


def _inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """RFC 6962 PATH(index, D[start:end]) as the leaf ranges whose hashes it lists."""
    ranges: list[tuple[int, int]] = []
    while end - start > 1:
        split = start + _split(end - start)
        if index < split:
            ranges.append((split, end))
            end = split
        else:
            ranges.append((start, split))
            start = split
    ranges.reverse()  # the proof lists hashes from the leaf upwards
    return ranges


def _consistency_ranges(old: int, new: int) -> list[tuple[int, int]]:
    """RFC 6962 SUBPROOF(old, D[0:new], True) as leaf ranges."""
    ranges: list[tuple[int, int]] = []
    start, end, complete = 0, new, True
    while True:
        if start + old == end:
            if not complete:
                ranges.append((start, end))
            break
        split = _split(end - start)
        if old <= split:
            ranges.append((start + split, end))
            end = start + split
        else:
            ranges.append((start, start + split))
            old -= split
            start += split
            complete = False
    ranges.reverse()
    return ranges


def _range_hashes(ranges: Sequence[tuple[int, int]], read: NodeReader) -> list[bytes]:
    """Each range's hash, reading every node needed in one call."""
    parts = [range_nodes(start, end) for start, end in ranges]
    wanted = [node for part in parts for node in part]
    hashes = list(read(wanted)) if wanted else []
    if len(hashes) != len(wanted):
        raise ProofError("the node store does not hold every node asked for")
    result: list[bytes] = []
    at = 0
    for part in parts:
        result.append(fold(hashes[at : at + len(part)]))
        at += len(part)
    return result


def root(size: int, read: NodeReader) -> bytes:
    """The root of the tree over the first `size` leaves."""
    if size == 0:
        return EMPTY_ROOT
    return _range_hashes([(0, size)], read)[0]


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """The audit path of leaf `index` in the tree of `size` leaves."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    return _range_hashes(_inclusion_ranges(index, 0, size), read)


def consistency_proof(old: int, new: int, read: NodeReader) -> list[bytes]:
    """The proof that the tree of `old` leaves is a prefix of the tree of `new`."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old == 0 or old == new:
        return []
    return _range_hashes(_consistency_ranges(old, new), read)


def _shift_while_even(first: int, second: int) -> tuple[int, int]:
    while first and not first & 1:
        first >>= 1
        second >>= 1
    return first, second


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes
) -> bool:
    """Whether `proof` shows the leaf hash `leaf` at `index` under `expected_root`."""
    if not 0 <= index < size:
        return False
    position, last = index, size - 1
    result = leaf
    for sibling in proof:
        if last == 0:
            return False
        if position & 1 or position == last:
            result = node_hash(sibling, result)
            if not position & 1:
                position, last = _shift_while_even(position, last)
        else:
            result = node_hash(result, sibling)
        position >>= 1
        last >>= 1
    return last == 0 and result == expected_root


def verify_consistency(
    old: int,
    new: int,
    proof: Sequence[bytes],
    old_root: bytes,
    new_root: bytes,
) -> bool:
    """Whether `proof` shows the tree (old, old_root) is a prefix of (new, new_root)."""
    if not 0 <= old <= new:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof and old_root == EMPTY_ROOT
    path = list(proof)
    if old & (old - 1) == 0:  # a complete subtree: the verifier knows its hash
        path.insert(0, old_root)
    if not path:
        return False
    position, last = old - 1, new - 1
    while position & 1:
        position >>= 1
        last >>= 1
    old_result = new_result = path[0]
    for sibling in path[1:]:
        if last == 0:
            return False
        if position & 1 or position == last:
            old_result = node_hash(sibling, old_result)
            new_result = node_hash(sibling, new_result)
            if not position & 1:
                position, last = _shift_while_even(position, last)
        else:
            new_result = node_hash(new_result, sibling)
        position >>= 1
        last >>= 1
    return last == 0 and old_result == old_root and new_result == new_root


class Node(NamedTuple):
    """A complete subtree's hash; `offset` is its index within its level."""

    level: int
    offset: int
    hash: bytes


class Frontier:
    """The complete subtrees of a growing tree: O(log n) state.

    `append` returns every subtree it completes (the leaf itself first), which
    is what a store keeps so that proofs need no rehashing.
    """

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        """`hashes`: the subtrees of `size`, largest first (see `coordinates`)."""
        if len(hashes) != size.bit_count():
            raise ProofError(f"a tree of {size} leaves has {size.bit_count()} peaks")
        self.size = size
        self._hashes = list(hashes)

    @staticmethod
    def coordinates(size: int) -> list[Coordinate]:
        """Where the frontier of a tree of `size` leaves sits, largest first."""
        peaks: list[Coordinate] = []
        start = 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                peaks.append((level, start >> level))
                start += 1 << level
        return peaks

    @classmethod
    def load(cls, size: int, read: NodeReader) -> Frontier:
        coordinates = cls.coordinates(size)
        hashes = list(read(coordinates)) if coordinates else []
        return cls(size, hashes)

    def append(self, leaf: bytes) -> list[Node]:
        index = self.size
        created = [Node(0, index, leaf)]
        current, level = leaf, 0
        while index >> level & 1:  # the new node is a right child: merge upwards
            current = node_hash(self._hashes.pop(), current)
            level += 1
            created.append(Node(level, index >> level, current))
        self._hashes.append(current)
        self.size += 1
        return created

    def push(self, leaf: bytes) -> None:
        """`append` without reporting the nodes: for computing a root only."""
        hashes = self._hashes
        index = self.size
        while index & 1:
            leaf = node_hash(hashes.pop(), leaf)
            index >>= 1
        hashes.append(leaf)
        self.size += 1

    def root(self) -> bytes:
        return fold(self._hashes) if self._hashes else EMPTY_ROOT


class MerkleTree:
    """Every complete subtree of a tree kept in memory; for tests and small logs."""

    def __init__(self, leaves: Sequence[bytes] = ()) -> None:
        self._levels: list[list[bytes]] = []
        self._frontier = Frontier()
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        return self._frontier.size

    def append(self, leaf: bytes) -> None:
        for node in self._frontier.append(leaf):
            if node.level == len(self._levels):
                self._levels.append([])
            self._levels[node.level].append(node.hash)

    def read(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return [self._levels[level][index] for level, index in coordinates]

    def root(self, size: int | None = None) -> bytes:
        return root(self.size if size is None else size, self.read)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return inclusion_proof(index, self.size if size is None else size, self.read)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        return consistency_proof(old, self.size if new is None else new, self.read)


_NODE_TAG_HASH = hashlib.sha256(b"\x01")


def _perfect_root(leaves: Sequence[bytes]) -> bytes:
    """Root of a power-of-two number of leaf hashes, a level at a time."""
    level = list(leaves)
    while len(level) > 1:
        # Each pair is 64 consecutive bytes of the level joined; hashing them
        # from a copy of a hash already fed the node tag costs less than a
        # new hash object per node (most of the cost at 65 bytes).
        joined = memoryview(b"".join(level))
        tagged = _NODE_TAG_HASH.copy
        following = []
        for at in range(0, len(joined), 64):
            node = tagged()
            node.update(joined[at : at + 64])
            following.append(node.digest())
        level = following
    return level[0]


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    """The root over these leaf hashes, computed from all of them (no store).

    The tree of n leaves is its perfect subtrees (one per set bit of n, the
    largest first) folded from the right; each is hashed level by level,
    which runs a tight loop rather than one call per leaf.
    """
    if not leaves:
        return EMPTY_ROOT
    peaks: list[bytes] = []
    start = 0
    for level, _ in Frontier.coordinates(len(leaves)):
        peaks.append(_perfect_root(leaves[start : start + (1 << level)]))
        start += 1 << level
    return fold(peaks)


def reference_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962's recursive definition of the root, written out for comparison."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    split = _split(len(leaves))
    return node_hash(reference_root(leaves[:split]), reference_root(leaves[split:]))


LevelReader = Callable[[int], Sequence[tuple[int, bytes]]]
"""A stored tree's nodes of one level as (index, hash), in index order; level 0
gives the leaf hashes."""


def tree_fault(size: int, read_level: LevelReader) -> str | None:
    """Where a stored tree of `size` leaves is not a tree of its own leaves.

    Every complete subtree must be stored exactly once, as the hash of its two
    children: a node zeroed, changed, removed or added anywhere is named,
    whether or not a checkpoint or proof would read it. With the root of a
    signed prefix checked too, every stored node of that prefix is then the
    signed one. None: consistent.
    """
    below: list[bytes] = []
    for level in range(size.bit_length()):
        expected = size >> level
        found = read_level(level)
        what = "leaf" if level == 0 else f"node at level {level}"
        for index, (at, stored) in enumerate(found):
            if at != index or index >= expected:
                return f"{what} index {at} is not where a tree of {size} has one"
            if level and stored != node_hash(below[2 * index], below[2 * index + 1]):
                first, last = index << level, ((index + 1) << level) - 1
                return (
                    f"the {what} index {index} (over leaves {first}..{last}) is not "
                    "the hash of its children"
                )
        if len(found) != expected:
            return f"{expected - len(found)} {what}s of a tree of {size} are missing"
        below = [stored for _, stored in found]
    return None
