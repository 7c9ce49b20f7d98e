// Retries against the real service behind a fault proxy: a loopback HTTP
// proxy that answers the first requests itself (a 503 with Retry-After, as
// the service does while its database is down) or forwards a request and
// then breaks the connection before the answer (an unknown outcome).
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";
import {
  Client,
  DatabaseUnavailableError,
  ServiceUnreachableError,
} from "../../../infra/http/web/js/src/index.js";
import { BASE_URL, client, tokens } from "./env.mjs";

/** Starts a proxy to the service; `fault(request, count)` returns
 * "unavailable", "drop" (forward, then break the connection) or null. */
async function faultProxy(fault) {
  const target = new URL(BASE_URL);
  const seen = [];
  const server = http.createServer((request, response) => {
    seen.push({ method: request.method, path: request.url, at: Date.now() });
    const kind = fault(request, seen.length);
    if (kind === "unavailable") {
      request.resume();
      response.writeHead(503, { "Content-Type": "application/json", "Retry-After": "1" });
      response.end(JSON.stringify({ error: { code: "database_unavailable", message: "down" } }));
      return;
    }
    const upstream = http.request(
      { host: target.hostname, port: target.port, method: request.method, path: request.url, headers: request.headers },
      (answer) => {
        if (kind === "drop") {
          answer.resume();
          answer.on("end", () => response.socket.destroy());
          return;
        }
        response.writeHead(answer.statusCode, answer.headers);
        answer.pipe(response);
      },
    );
    request.pipe(upstream);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, seen, close: () => new Promise((resolve) => server.close(resolve)) };
}

const fastRetry = { attempts: 6, initialDelay: 0.05, maxDelay: 2, maxElapsed: 20 };

test("a turn answered 503 is sent again after Retry-After, and recorded once", async () => {
  const { conversation_id: id } = await client().startConversation();
  const proxy = await faultProxy((request, count) => (count <= 2 ? "unavailable" : null));
  try {
    const api = new Client(proxy.url, tokens.a, { retry: fastRetry });
    const receipt = await api.putTurn(id, "t1", { question: "q", answer: "a" });
    assert.equal(receipt.turn_id, "t1");
    assert.equal(proxy.seen.length, 3);
    for (const i of [1, 2]) {
      assert.ok(proxy.seen[i].at - proxy.seen[i - 1].at >= 1000, "waited at least Retry-After");
    }
  } finally {
    await proxy.close();
  }
  assert.equal((await client().getHistory(id)).total_turns, 1);
});

test("a turn whose answer was lost is sent again and written once", async () => {
  const { conversation_id: id } = await client().startConversation();
  const proxy = await faultProxy((request, count) => (count === 1 ? "drop" : null));
  try {
    const api = new Client(proxy.url, tokens.a, { retry: fastRetry });
    const receipt = await api.putTurn(id, "t1", { question: "q", answer: "a" });
    assert.equal(proxy.seen.length, 2);
    assert.equal(receipt.version, 2);
  } finally {
    await proxy.close();
  }
  const history = await client().getHistory(id);
  assert.equal(history.total_turns, 1);
  assert.equal(history.version, 2);
});

test("adding a device is not retried after a 503: no second token", async () => {
  const proxy = await faultProxy(() => "unavailable");
  try {
    const api = new Client(proxy.url, tokens.a, { retry: fastRetry });
    await assert.rejects(api.addDevice("phone"), (error) => {
      assert.ok(error instanceof DatabaseUnavailableError);
      assert.equal(error.retryAfter, 1);
      return true;
    });
    assert.equal(proxy.seen.length, 1);
  } finally {
    await proxy.close();
  }
});

test("after the last attempt the 503 is raised; a refused connection is unreachable", async () => {
  const proxy = await faultProxy(() => "unavailable");
  try {
    const api = new Client(proxy.url, tokens.a, {
      retry: { attempts: 2, initialDelay: 0.01, maxDelay: 1, maxElapsed: 5 },
    });
    await assert.rejects(api.listConversations(), DatabaseUnavailableError);
    assert.equal(proxy.seen.length, 2);
  } finally {
    await proxy.close();
  }
  const closed = new Client(proxy.url, tokens.a, {
    retry: { attempts: 2, initialDelay: 0.01, maxDelay: 1, maxElapsed: 5 },
  });
  await assert.rejects(closed.addDevice("x"), ServiceUnreachableError);
});
