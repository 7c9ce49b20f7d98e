"""The Merkle tree against RFC 6962's definition, and its proofs' soundness."""

from __future__ import annotations

import hashlib
from pathlib import Path
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.domain.merkle import (
    EMPTY_ROOT,
    Frontier,
    MerkleTree,
    leaf_hash,
    reference_root,
    root_of_leaves,
    verify_consistency,
    verify_inclusion,
)
from turnledger.domain.transparency import (
    LEAF_TAG,
    InvalidText,
    RawRow,
    cell,
    leaf_input,
    read_leaf_input,
    row_leaf,
)

leaves_strategy = st.lists(st.binary(max_size=8), min_size=1, max_size=70).map(
    lambda items: [leaf_hash(bytes([i % 256]) + item) for i, item in enumerate(items)]
)


def test_known_answers() -> None:
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    one = leaf_hash(b"")
    assert one == hashlib.sha256(b"\x00").digest()
    two = MerkleTree([one, leaf_hash(b"a")]).root()
    assert two == hashlib.sha256(b"\x01" + one + leaf_hash(b"a")).digest()


@given(leaves_strategy)
def test_roots_of_every_size_match_the_recursive_definition(
    leaves: list[bytes],
) -> None:
    tree = MerkleTree(leaves)
    frontier = Frontier()
    for size in range(1, len(leaves) + 1):
        frontier.append(leaves[size - 1])
        assert tree.root(size) == reference_root(leaves[:size]) == frontier.root()
        assert root_of_leaves(leaves[:size]) == frontier.root()


@given(leaves_strategy, st.data())
def test_inclusion_proofs_verify_for_every_leaf_and_fail_when_changed(
    leaves: list[bytes], data: st.DataObject
) -> None:
    tree = MerkleTree(leaves)
    size = data.draw(st.integers(1, len(leaves)))
    root = tree.root(size)
    for index in range(size):
        proof = tree.inclusion_proof(index, size)
        assert len(proof) <= (size - 1).bit_length()
        assert verify_inclusion(leaves[index], index, size, proof, root)
        assert not verify_inclusion(leaf_hash(b"other"), index, size, proof, root)
        if size > 1:
            other = (index + 1) % size
            assert not verify_inclusion(leaves[index], other, size, proof, root) or (
                leaves[other] == leaves[index]
            )
        for position in range(len(proof)):
            bent = list(proof)
            bent[position] = hashlib.sha256(bent[position]).digest()
            assert not verify_inclusion(leaves[index], index, size, bent, root)


@given(leaves_strategy, st.data())
def test_consistency_proofs_verify_for_every_pair_of_sizes(
    leaves: list[bytes], data: st.DataObject
) -> None:
    tree = MerkleTree(leaves)
    new = data.draw(st.integers(1, len(leaves)))
    for old in range(0, new + 1):
        proof = tree.consistency_proof(old, new)
        assert verify_consistency(old, new, proof, tree.root(old), tree.root(new))
        if 0 < old < new:
            assert len(proof) <= 2 * new.bit_length()
            assert not verify_consistency(
                old, new, proof, tree.root(old), leaf_hash(b"x")
            )
            assert not verify_consistency(
                old, new, proof, leaf_hash(b"x"), tree.root(new)
            )


@given(leaves_strategy, st.data())
def test_any_changed_or_reordered_leaf_breaks_consistency(
    leaves: list[bytes], data: st.DataObject
) -> None:
    old = data.draw(st.integers(1, len(leaves)))
    tree = MerkleTree(leaves)
    altered = list(leaves)
    position = data.draw(st.integers(0, old - 1))
    if data.draw(st.booleans()) and old > 1:
        other = data.draw(st.integers(0, old - 1).filter(lambda i: i != position))
        altered[position], altered[other] = altered[other], altered[position]
    else:
        altered[position] = leaf_hash(b"forged" + altered[position])
    if altered[:old] == leaves[:old]:
        return  # swapped two equal leaves: nothing changed
    rewritten = MerkleTree(altered)
    assert rewritten.root(old) != tree.root(old)
    proof = rewritten.consistency_proof(old, len(leaves))
    assert not verify_consistency(
        old, len(leaves), proof, tree.root(old), rewritten.root()
    )
    # The forger's leaf, with the forger's own proof, against the signed root.
    if altered[position] != leaves[position]:
        assert not verify_inclusion(
            altered[position],
            position,
            old,
            rewritten.inclusion_proof(position, old),
            tree.root(old),
        )


@settings(max_examples=50)
@given(st.integers(0, 2000), st.integers(1, 40))
def test_a_frontier_reloaded_from_stored_nodes_goes_on_alike(
    size: int, more: int
) -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(size + more)]
    tree = MerkleTree(leaves[:size])
    frontier = Frontier.load(size, tree.read)
    assert len(Frontier.coordinates(size)) == size.bit_count()
    for leaf in leaves[size:]:
        frontier.append(leaf)
    assert frontier.root() == MerkleTree(leaves).root()


CONVERSATION = UUID("12345678-1234-5678-1234-567812345678")


cells = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([-(2**63), 2**63 - 1, 2**63, 0, -1]),
    st.text(max_size=40),
    st.binary(max_size=300),
    st.uuids(),
    st.uuids().map(lambda u: u.hex),
    st.sampled_from(["pkg:Topic", "domain.conversation:Conversation.TurnConfirmed"]),
    st.binary(max_size=20).map(InvalidText),
)


@given(
    st.tuples(
        cells, st.one_of(st.uuids(), cells), cells, cells, st.one_of(st.binary(), cells)
    )
)
@settings(max_examples=400)
def test_the_fast_leaf_equals_the_documented_one_for_any_row(
    values: tuple[object, object, object, object, object],
) -> None:
    # The documented form, cell by cell (docs/transparency.md); row_leaf and
    # leaf_input take shortcuts for common rows and must give the same bytes.
    row = RawRow(*values)  # type: ignore[arg-type]
    documented = LEAF_TAG + b"".join(
        (
            cell(row.originator_id, uuid_text=True),
            cell(row.version),
            cell(row.notification_id),
            cell(row.topic),
            cell(row.state),
        )
    )
    assert leaf_input(row) == documented
    assert row_leaf(row) == hashlib.sha256(b"\x00" + documented).digest()
    # A second time: shortcuts that cache (topics, SQLite ids) agree too.
    assert row_leaf(row) == hashlib.sha256(b"\x00" + documented).digest()


def test_a_leaf_binds_every_cell_of_the_row() -> None:
    row = RawRow(7, CONVERSATION, 3, "pkg:Topic", b'{"a":1}')
    assert leaf_input(row) == leaf_input(
        RawRow(7, CONVERSATION.hex, 3, "pkg:Topic", b'{"a":1}')  # SQLite's form
    )
    variants = [
        RawRow(8, CONVERSATION, 3, "pkg:Topic", b'{"a":1}'),
        RawRow(7, UUID(int=1), 3, "pkg:Topic", b'{"a":1}'),
        RawRow(7, CONVERSATION, 4, "pkg:Topic", b'{"a":1}'),
        RawRow(7, CONVERSATION, 3, "pkg:Other", b'{"a":1}'),
        RawRow(7, CONVERSATION, 3, "pkg:Topic", b'{"a":2}'),
        RawRow(7, CONVERSATION, 3, None, b'{"a":1}'),
        RawRow(7, CONVERSATION, 3, "pkg:Topic", None),
        RawRow(7, CONVERSATION, 3, "pkg:Topic", '{"a":1}'),
        RawRow(7, CONVERSATION, 3, "pkg:Topic", 42),
        RawRow(7, CONVERSATION, 3, InvalidText(b"pkg:Topic"), b'{"a":1}'),
        RawRow(7, str(CONVERSATION), 3, "pkg:Topic", b'{"a":1}'),
        RawRow(7, CONVERSATION, "3", "pkg:Topic", b'{"a":1}'),
    ]
    leaves = {row_leaf(v) for v in variants}
    assert row_leaf(row) not in leaves and len(leaves) == len(variants)
    facts = read_leaf_input(leaf_input(row))
    assert facts is not None
    assert (facts.conversation, facts.version, facts.notification_id) == (
        str(CONVERSATION),
        "3",
        "7",
    )
    for variant in variants:
        assert read_leaf_input(leaf_input(variant)) is not None


def test_the_signing_key_is_read_as_base64_or_pem_and_never_guessed(
    tmp_path: Path,
) -> None:
    import pytest
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from pydantic import SecretStr

    from turnledger.domain.errors import CheckpointError
    from turnledger.infra.settings import Settings
    from turnledger.infra.signing import signing_key

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "key.pem").write_bytes(pem)
    base = Settings(_env_file=None, persistence="memory")
    from_file = base.model_copy(update={"audit_signing_key_file": tmp_path / "key.pem"})
    assert (
        signing_key(from_file).public_key().public_bytes_raw()
        == key.public_key().public_bytes_raw()
    )
    for broken in (
        base,
        base.model_copy(update={"audit_signing_key": SecretStr("c2hvcnQ=")}),
        base.model_copy(update={"audit_signing_key_file": tmp_path / "missing"}),
        from_file.model_copy(update={"audit_signing_key": SecretStr("x")}),
    ):
        with pytest.raises(CheckpointError):
            signing_key(broken)
