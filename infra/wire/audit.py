"""Wire models of the audit routes: the newest signed checkpoint and a turn's
inclusion proof (formats in docs/transparency.md)."""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, Field


class CheckpointOut(BaseModel):
    format: str = Field(description='"turnledger-checkpoint/v1"')
    origin: str
    tree_size: int = Field(description="how many events of the log it commits to")
    root_hash: str = Field(description="hex of the Merkle tree's root")
    timestamp: str = Field(description="when it was signed (UTC, ISO 8601)")
    public_key: str = Field(description="base64 of the 32-byte Ed25519 public key")
    key_id: str
    signature: str = Field(description="base64 of the 64-byte Ed25519 signature")


class ProvedEventOut(BaseModel):
    originator_id: UUID
    originator_version: int
    notification_id: int
    topic: str | None
    state_sha256: str = Field(description="hex SHA-256 of the stored state bytes")
    leaf_input: str = Field(description="hex of the leaf's input bytes")


class InclusionProofOut(BaseModel):
    format: str = Field(description='"turnledger-inclusion-proof/v1"')
    checkpoint: CheckpointOut
    leaf_index: int
    event: ProvedEventOut
    leaf_hash: str
    audit_path: list[str] = Field(description="RFC 6962 PATH, hex, leaf upwards")
