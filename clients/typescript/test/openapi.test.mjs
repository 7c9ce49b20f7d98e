// The committed types (src/schema.ts) are what the generator makes of the
// running service's OpenAPI document: a route or field changed on the server
// without `npm run generate` fails here.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { generateTypes, loadDocument } from "../scripts/generate.mjs";
import { BASE_URL } from "./env.mjs";

test("the committed types match the running service's OpenAPI document", async () => {
  const generated = await generateTypes(await loadDocument(`${BASE_URL}/openapi.json`));
  const committed = await readFile(new URL("../src/schema.ts", import.meta.url), "utf8");
  assert.ok(
    generated === committed,
    "src/schema.ts is stale: run scripts/ts-types (regenerates it and rebuilds the page)",
  );
});
