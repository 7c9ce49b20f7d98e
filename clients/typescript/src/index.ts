export * from "./client.js";
export * from "./errors.js";
export * from "./proof.js";
export * from "./retry.js";
export * from "./sync.js";
export type { components, paths } from "./schema.js";
