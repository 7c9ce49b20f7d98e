import assert from "node:assert/strict";
import { test } from "node:test";
import { follow, LocalCopy, MemoryCursorStore, pull } from "../../../infra/http/web/js/src/index.js";
import { client, tokens } from "./env.mjs";

async function waitFor(predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("device B's long-poll brings A's turn, and A's deletion removes its text", async () => {
  const a = client(tokens.a);
  const b = client(tokens.b);
  const copy = new LocalCopy();
  const stop = new AbortController();
  const following = follow(b, new MemoryCursorStore(), (changes) => copy.apply(changes), {
    signal: stop.signal,
    timeout: 10,
  });
  try {
    const { conversation_id: id } = await a.startConversation();
    await a.putTurn(id, "t1", { question: "secret question", answer: "secret answer" });
    await a.putTurn(id, "t2", { question: "kept", answer: "", status: "failed" });
    await waitFor(() => copy.conversations.get(id)?.turns.size === 2);
    const turns = copy.conversations.get(id).turns;
    assert.equal(turns.get("t1").answer, "secret answer");
    assert.equal(turns.get("t2").status, "failed");
    await a.deleteHistory(id, ["t1"]);
    await waitFor(() => turns.get("t1").deleted);
    assert.equal(turns.get("t1").question, null);
    assert.equal(turns.get("t1").answer, null);
    assert.equal(turns.get("t2").question, "kept");
    await a.deleteHistory(id, null);
    await waitFor(() => turns.get("t2").deleted);
    assert.equal(JSON.stringify([...turns.values()]).includes("secret"), false);
  } finally {
    stop.abort();
    await following.catch(() => {});
  }
});

test("a fresh copy pulled after a deletion never holds the text", async () => {
  const a = client(tokens.a);
  const { conversation_id: id } = await a.startConversation();
  await a.putTurn(id, "gone", { question: "forget me", answer: "please" });
  await a.deleteHistory(id, ["gone"]);
  const copy = new LocalCopy();
  await pull(client(tokens.b), new MemoryCursorStore(), (changes) => copy.apply(changes));
  const turn = copy.conversations.get(id).turns.get("gone");
  assert.equal(turn.deleted, true);
  assert.equal(turn.question, null);
});

test("the cursor moves only after the handler returned", async () => {
  const a = client(tokens.a);
  const { conversation_id: id } = await a.startConversation();
  await a.putTurn(id, "t1", { question: "q", answer: "a" });
  const store = new MemoryCursorStore();
  await pull(client(tokens.b), store, () => {});
  const saved = store.load();
  await a.putTurn(id, "t2", { question: "q2", answer: "a2" });
  await assert.rejects(
    pull(client(tokens.b), store, () => {
      throw new Error("handler failed");
    }),
    /handler failed/,
  );
  assert.equal(store.load(), saved);
  const handed = [];
  await pull(client(tokens.b), store, (changes) => handed.push(...changes));
  assert.deepEqual(
    handed.filter((c) => c.kind === "turn_recorded").map((c) => c.turn_id),
    ["t2"],
  );
});

test("a change handed over again is applied once (by conversation and version)", async () => {
  const a = client(tokens.a);
  const { conversation_id: id } = await a.startConversation();
  await a.putTurn(id, "t1", { question: "q", answer: "a" });
  const page = await client(tokens.b).sync({});
  const copy = new LocalCopy();
  copy.apply(page.changes);
  await a.deleteHistory(id, ["t1"]);
  const later = await client(tokens.b).sync({ since: page.next_cursor });
  copy.apply(later.changes);
  copy.apply(page.changes); // the old batch again: must not bring the text back
  assert.equal(copy.conversations.get(id).turns.get("t1").question, null);
});

test("a long-poll returns when a change is committed, not at its timeout", async () => {
  const a = client(tokens.a);
  const { conversation_id: id } = await a.startConversation();
  let head = await client(tokens.b).sync({});
  while (head.has_more) head = await client(tokens.b).sync({ since: head.next_cursor });
  const cursor = head.next_cursor;
  const started = Date.now();
  const waiting = client(tokens.b).sync({ since: cursor, timeout: 20 });
  setTimeout(() => void a.putTurn(id, "t1", { question: "q", answer: "a" }), 300);
  const page = await waiting;
  assert.ok(page.changes.some((c) => c.kind === "turn_recorded" && c.turn_id === "t1"));
  assert.ok(Date.now() - started < 10_000);
});
