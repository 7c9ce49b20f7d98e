import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConversationNotFoundError,
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

test("another user's conversation has no proof for this device", async () => {
  const { id } = await provableTurn();
  await assert.rejects(once(tokens.other).getInclusionProof(id, 1), ConversationNotFoundError);
});
