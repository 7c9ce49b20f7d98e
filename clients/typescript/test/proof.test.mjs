import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConversationNotFoundError,
  verifyCheckpoint,
  verifyInclusionProof,
} from "../../../infra/http/web/js/src/index.js";
import { client, once, tokens } from "./env.mjs";

async function provableTurn() {
  const api = client();
  const { conversation_id: id } = await api.startConversation();
  const receipt = await api.putTurn(id, "t1", { question: "q", answer: "a" });
  // The service signs a checkpoint every interval (TURNLEDGER_AUDIT_CHECKPOINT_*).
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      return { id, proof: await once().getInclusionProof(id, receipt.version) };
    } catch (error) {
      if (Date.now() > deadline || error.code !== "proof_unavailable") throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

test("a real turn's inclusion proof verifies with WebCrypto alone", async () => {
  const { proof } = await provableTurn();
  const check = await verifyInclusionProof(proof);
  assert.deepEqual(
    [check.ok, check.leafMatches, check.rootMatches, check.signatureValid],
    [true, true, true, true],
  );
  const pinned = await verifyInclusionProof(proof, proof.checkpoint.public_key);
  assert.equal(pinned.keyPinned, true);
  assert.ok(pinned.ok);
});

test("every tampered part of a proof fails", async () => {
  const { proof } = await provableTurn();
  const flip = (hex) => (hex[0] === "0" ? "1" : "0") + hex.slice(1);
  const tampered = [
    { ...proof, event: { ...proof.event, state_sha256: flip(proof.event.state_sha256) } },
    { ...proof, event: { ...proof.event, originator_version: proof.event.originator_version + 1 } },
    { ...proof, leaf_index: proof.leaf_index + 1 },
    { ...proof, checkpoint: { ...proof.checkpoint, root_hash: flip(proof.checkpoint.root_hash) } },
    { ...proof, checkpoint: { ...proof.checkpoint, timestamp: "2000-01-01T00:00:00.000000Z" } },
  ];
  if (proof.audit_path.length > 0) {
    tampered.push({ ...proof, audit_path: [flip(proof.audit_path[0]), ...proof.audit_path.slice(1)] });
  }
  for (const bad of tampered) {
    assert.equal((await verifyInclusionProof(bad)).ok, false, JSON.stringify(bad).slice(0, 200));
  }
  const otherKey = Buffer.alloc(32, 7).toString("base64");
  const wrongKey = await verifyInclusionProof(proof, otherKey);
  assert.equal(wrongKey.ok, false);
});

test("the checkpoint's deletion record head is served and verified with it", async () => {
  await provableTurn();
  const checkpoint = await once().getCheckpoint();
  const record = checkpoint.deletion_record;
  assert.ok(record, "a SQLite or PostgreSQL service signs its deletion record's head");
  assert.equal(record.format, "turnledger-deletion-record-head/v1");
  const check = await verifyCheckpoint(checkpoint);
  assert.deepEqual([check.ok, check.coversDeletionRecord], [true, true]);
  assert.equal((await verifyCheckpoint(checkpoint, checkpoint.public_key)).keyPinned, true);
  const flip = (hex) => (hex[0] === "0" ? "1" : "0") + hex.slice(1);
  const otherSignature = Buffer.from(Buffer.from(record.signature, "base64").map((b, i) => (i === 0 ? b ^ 1 : b))).toString("base64");
  const tampered = [
    { ...record, entries: record.entries + 1 },
    { ...record, entries: record.entries === 0 ? 2 : record.entries - 1 },
    { ...record, head: flip(record.head) },
    { ...record, record_id: flip(record.record_id) },
    { ...record, format: "turnledger-deletion-record-head/v0" },
    { ...record, signature: otherSignature },
  ];
  for (const bad of tampered) {
    const altered = { ...checkpoint, deletion_record: bad };
    assert.equal((await verifyCheckpoint(altered)).ok, false, JSON.stringify(bad));
  }
  // The proof's checkpoint carries the same block, and a tampered one fails the proof.
  const { proof } = await provableTurn();
  assert.ok(proof.checkpoint.deletion_record);
  const bad = {
    ...proof,
    checkpoint: {
      ...proof.checkpoint,
      deletion_record: { ...proof.checkpoint.deletion_record, head: flip(proof.checkpoint.deletion_record.head) },
    },
  };
  const failed = await verifyInclusionProof(bad);
  assert.deepEqual([failed.ok, failed.signatureValid], [false, false]);
});

test("another user's conversation has no proof for this device", async () => {
  const { id } = await provableTurn();
  await assert.rejects(once(tokens.other).getInclusionProof(id, 1), ConversationNotFoundError);
});
