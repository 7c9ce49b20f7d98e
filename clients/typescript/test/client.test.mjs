import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConversationNotFoundError,
  InvalidInputError,
  NotFoundError,
  ReceiptNotFoundError,
  ServiceError,
  TurnConflictError,
  TurnTooLargeError,
  UnauthenticatedError,
  VersionConflictError,
  windowSent,
} from "../../../infra/http/web/js/src/index.js";
import { client, once, tokens, uniqueId } from "./env.mjs";

test("a turn written twice with its id is recorded once, same receipt", async () => {
  const api = client();
  const { conversation_id: id } = await api.startConversation();
  const turn = { question: "Hi", answer: "Hello", status: "confirmed" };
  const first = await api.putTurn(id, "t1", turn);
  const again = await api.putTurn(id, "t1", turn);
  assert.deepEqual(again, first);
  const history = await api.getHistory(id);
  assert.equal(history.total_turns, 1);
  assert.equal(history.items[0].question, "Hi");
});

test("a keyed conversation start sent again names the same conversation", async () => {
  const api = client();
  const key = uniqueId("key");
  const first = await api.startConversation(key);
  const again = await api.startConversation(key);
  assert.equal(again.conversation_id, first.conversation_id);
});

test("error codes become their classes, with the body's fields", async () => {
  const api = once();
  const { conversation_id: id } = await api.startConversation();
  await api.putTurn(id, "t1", { question: "q", answer: "a" });
  await assert.rejects(api.putTurn(id, "t1", { question: "other", answer: "a" }), (error) => {
    assert.ok(error instanceof TurnConflictError);
    assert.equal(error.status, 409);
    assert.equal(error.code, "turn_conflict");
    return true;
  });
  await assert.rejects(
    api.putTurn(id, "t2", { question: "q", answer: "a", expected_version: 1 }),
    (error) => error instanceof VersionConflictError && error.currentVersion === 2,
  );
  await assert.rejects(
    api.putTurn(id, "t3", { question: 5, answer: "a" }),
    (error) => error instanceof InvalidInputError && error.code === "invalid_request",
  );
  await assert.rejects(
    api.getConversation("00000000-0000-4000-8000-000000000000"),
    ConversationNotFoundError,
  );
  await assert.rejects(
    api.putTurn(id, "t4", { question: "x".repeat(3_000_000), answer: "" }),
    (error) => error instanceof InvalidInputError,
  );
  await assert.rejects(once("not-a-token").listConversations(), UnauthenticatedError);
});

test("another user's conversation is answered as one that does not exist", async () => {
  const { conversation_id: id } = await client().startConversation();
  await assert.rejects(once(tokens.other).getHistory(id), ConversationNotFoundError);
  await assert.rejects(
    once(tokens.other).putTurn(id, "t1", { question: "q", answer: "a" }),
    ConversationNotFoundError,
  );
  assert.equal((await client().getHistory(id)).total_turns, 0);
});

test("a stored receipt is asked for by turn; its errors are typed", async () => {
  const api = once();
  const { conversation_id: id } = await api.startConversation();
  await api.putTurn(id, "t1", { question: "q", answer: "a" });
  // Written without its window: nothing stored.
  await assert.rejects(api.getReceipt(id, "t1"), (error) => {
    assert.ok(error instanceof ReceiptNotFoundError && error instanceof NotFoundError);
    assert.equal(error.code, "receipt_not_found");
    return true;
  });
  await assert.rejects(api.getReceipt(id, "t2"), (error) => error.code === "turn_not_found");
  const other = once(tokens.other);
  const unknown = crypto.randomUUID();
  const theirs = await other.getReceipt(id, "t1").catch((error) => error);
  const missing = await other.getReceipt(unknown, "t1").catch((error) => error);
  assert.ok(theirs instanceof ConversationNotFoundError);
  assert.equal(theirs.message, missing.message.replace(unknown, id));
});

test("a turn put with the window it replied to keeps that window's receipt", async () => {
  const api = once();
  const { conversation_id: id } = await api.startConversation();
  await api.putTurn(id, "t1", { question: "first", answer: "one" });
  const request = { question: "second?", model: "m-2", system: "be brief", max_bytes: 4096 };
  const window = await api.projectWindow(id, request);
  // Another device writes meanwhile: the receipt still names the window sent.
  await once(tokens.b).putTurn(id, "t-other", { question: "other", answer: "x" });
  const named = await windowSent(request, window);
  await api.putTurn(id, "t2", { question: "second?", answer: "two", window: named });
  const stored = await api.getReceipt(id, "t2");
  assert.equal(stored.receipt.ledger_version, window.ledger_version);
  assert.deepEqual(stored.receipt.turn_ids, window.kept_turn_ids);
  assert.match(stored.receipt.body_mac, /^[0-9a-f]{64}$/);
  // A body other than the one projected is refused, and nothing is written.
  const before = (await api.getConversation(id)).version;
  await assert.rejects(
    api.putTurn(id, "t3", {
      question: "second?",
      answer: "three",
      window: { ...named, body_sha256: "0".repeat(64) },
    }),
    (error) => error.status === 422 && error.field === "window",
  );
  assert.equal((await api.getConversation(id)).version, before);
});

test("an unknown code is a ServiceError with that status and code", async () => {
  await assert.rejects(
    once().send({ method: "DELETE", path: "/v1/conversations" }),
    (error) =>
      error.constructor === ServiceError && error.status === 405 && error.code === "method_not_allowed",
  );
  await assert.rejects(
    once().send({ method: "GET", path: "/v1/no-such-route" }),
    (error) => error instanceof NotFoundError && error.code === "not_found",
  );
});

test("the window and the fold are typed answers", async () => {
  const api = client();
  const { conversation_id: id } = await api.startConversation();
  await api.putTurn(id, "t1", { question: "Hi", answer: "Hello" });
  const window = await api.projectWindow(id, {
    question: "Next?",
    model: "gpt-4o",
    policy: { wire_format: "anthropic-messages", max_tokens: 4000 },
  });
  assert.equal(window.wire_format, "anthropic-messages");
  assert.deepEqual(window.kept_turn_ids, ["t1"]);
  assert.equal(new TextEncoder().encode(window.body).length, window.byte_length);
  const fold = await api.getFold(id);
  assert.equal(fold.fold_id, null);
});

test("TurnTooLargeError is an InvalidInputError", () => {
  assert.ok(TurnTooLargeError.prototype instanceof InvalidInputError);
});
