// The service under test: tests/browser/test_typescript_client.py starts a
// real `turnledger serve` (SQLite or PostgreSQL) and passes its address and
// device tokens: A and B are two devices of one user, OTHER another user's.
import { Client, NO_RETRIES } from "../../../infra/http/web/js/src/index.js";

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run tests/browser/test_typescript_client.py`);
  return value;
}

export const BASE_URL = required("TL_URL");
export const tokens = {
  a: required("TL_TOKEN_A"),
  b: required("TL_TOKEN_B"),
  other: required("TL_TOKEN_OTHER"),
};

export function client(token = tokens.a, options = {}) {
  return new Client(BASE_URL, token, options);
}

export function once(token = tokens.a) {
  return new Client(BASE_URL, token, { retry: NO_RETRIES });
}

export function uniqueId(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}
