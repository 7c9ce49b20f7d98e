// Checks an inclusion proof in the browser or Node with WebCrypto alone
// (SHA-256 and Ed25519), by the formats of docs/transparency.md: rebuild the
// leaf from the event's fields, walk the audit path to the root (RFC 9162
// 2.1.3.2), compare with the checkpoint's root, verify the checkpoint's
// signatures (the tree head's and the deletion record head's signed with it).
// Nothing here trusts the server's own verification.
const encoder = new TextEncoder();
export function hexToBytes(hex) {
    if (!/^(?:[0-9a-f]{2})*$/.test(hex))
        throw new Error("not lowercase hex");
    const bytes = new Uint8Array(hex.length / 2);
    for (let i = 0; i < bytes.length; i++)
        bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
    return bytes;
}
export function bytesToHex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
export function base64ToBytes(text) {
    const binary = atob(text);
    return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
function concat(...parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const part of parts) {
        out.set(part, at);
        at += part.length;
    }
    return out;
}
export async function sha256(data) {
    return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", data));
}
function int64(value) {
    const out = new Uint8Array(8);
    new DataView(out.buffer).setBigInt64(0, BigInt(value));
    return out;
}
function uuidBytes(uuid) {
    return hexToBytes(uuid.replaceAll("-", "").toLowerCase());
}
/** The leaf input of a well-formed event, from its fields. */
export async function leafInput(event) {
    if (event.topic === null)
        throw new Error("the event has no readable topic");
    return concat(encoder.encode("turnledger/leaf/v1\n"), encoder.encode("u"), uuidBytes(event.originator_id), encoder.encode("i"), int64(event.originator_version), encoder.encode("i"), int64(event.notification_id), encoder.encode("s"), await sha256(encoder.encode(event.topic)), encoder.encode("b"), hexToBytes(event.state_sha256));
}
async function node(left, right) {
    return sha256(concat(Uint8Array.of(1), left, right));
}
/** RFC 9162 2.1.3.2: the root the path leads to from `leaf` at `index`, or
 * null when the path's length does not fit the tree. */
export async function rootFromPath(leaf, index, size, path) {
    if (!(index >= 0 && index < size))
        return null;
    let fn = index;
    let sn = size - 1;
    let r = leaf;
    for (const p of path) {
        if (sn === 0)
            return null;
        if (fn % 2 === 1 || fn === sn) {
            r = await node(p, r);
            while (fn % 2 === 0 && fn !== 0) {
                fn = Math.floor(fn / 2);
                sn = Math.floor(sn / 2);
            }
        }
        else {
            r = await node(r, p);
        }
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
    }
    return sn === 0 ? r : null;
}
const CHECKPOINT_FORMAT = "turnledger-checkpoint/v1";
const RECORD_HEAD_FORMAT = "turnledger-deletion-record-head/v1";
/** The exact bytes a checkpoint's signature covers. */
export function signedMessage(checkpoint) {
    const lines = [
        CHECKPOINT_FORMAT,
        checkpoint.origin,
        String(checkpoint.tree_size),
        checkpoint.root_hash,
        checkpoint.timestamp,
    ];
    return encoder.encode(lines.map((line) => `${line}\n`).join(""));
}
/** The exact bytes the deletion record head's signature covers: its format
 * line, the checkpoint's own signed bytes (so the head is bound to this tree
 * head), then the record id, the entry count and the head. */
export function recordHeadMessage(checkpoint) {
    const record = checkpoint.deletion_record;
    if (record === null || record === undefined)
        return null;
    const lines = [record.record_id, String(record.entries), record.head];
    return concat(encoder.encode(`${RECORD_HEAD_FORMAT}\n`), signedMessage(checkpoint), encoder.encode(lines.map((line) => `${line}\n`).join("")));
}
async function ed25519Valid(publicKey, signature, message) {
    try {
        const key = await globalThis.crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
        return await globalThis.crypto.subtle.verify({ name: "Ed25519" }, key, base64ToBytes(signature), message);
    }
    catch {
        return false;
    }
}
/** The whole checkpoint's signatures hold under `publicKey`: the tree head's,
 * and the deletion record head's when the checkpoint carries one (its
 * format, id, entry count, head or signature altered: false). The formats are
 * not under a signature, so they are compared here. */
export async function checkpointSignatureValid(checkpoint, publicKey) {
    if (checkpoint.format !== CHECKPOINT_FORMAT)
        return false;
    if (!(await ed25519Valid(publicKey, checkpoint.signature, signedMessage(checkpoint)))) {
        return false;
    }
    const record = checkpoint.deletion_record;
    if (record === null || record === undefined)
        return true;
    if (record.format !== RECORD_HEAD_FORMAT ||
        !Number.isSafeInteger(record.entries) ||
        record.entries < 0 ||
        !/^[0-9a-f]{64}$/.test(record.head)) {
        return false;
    }
    const message = recordHeadMessage(checkpoint);
    return message !== null && (await ed25519Valid(publicKey, record.signature, message));
}
/** Checks a checkpoint on its own (GET /v1/audit/checkpoint): the tree head's
 * signature and the deletion record head's, with `pinnedKey` (base64 of the
 * 32-byte public key) when given, else with the key written in it. */
export async function verifyCheckpoint(checkpoint, pinnedKey = null) {
    const { key, keyPinned } = chooseKey(checkpoint, pinnedKey);
    const signatureValid = key !== null && (await checkpointSignatureValid(checkpoint, key));
    const ok = signatureValid && keyPinned !== false;
    const reason = !signatureValid
        ? "the checkpoint's signature does not verify"
        : keyPinned === false
            ? "the checkpoint is signed by another key than the pinned one"
            : "verified";
    const coversDeletionRecord = checkpoint.deletion_record !== null && checkpoint.deletion_record !== undefined;
    return { ok, signatureValid, keyPinned, coversDeletionRecord, reason };
}
function chooseKey(checkpoint, pinnedKey) {
    const embedded = safeBase64(checkpoint.public_key);
    const pinned = pinnedKey === null || pinnedKey.trim() === "" ? null : safeBase64(pinnedKey.trim());
    const keyPinned = pinned === null ? null : embedded !== null && bytesToHex(pinned) === bytesToHex(embedded);
    return { key: pinned ?? embedded, keyPinned };
}
/** Checks `proof`; with `pinnedKey` (base64 of the 32-byte public key) the
 * checkpoint must be signed by that key, else by the key written in it. */
export async function verifyInclusionProof(proof, pinnedKey = null) {
    const checkpoint = proof.checkpoint;
    let leafMatches = false;
    let rootMatches = false;
    let computedRoot = "";
    let reason = "";
    try {
        const input = await leafInput(proof.event);
        const leaf = await sha256(concat(Uint8Array.of(0), input));
        leafMatches =
            bytesToHex(input) === proof.event.leaf_input && bytesToHex(leaf) === proof.leaf_hash;
        const root = await rootFromPath(leaf, proof.leaf_index, checkpoint.tree_size, proof.audit_path.map(hexToBytes));
        computedRoot = root === null ? "" : bytesToHex(root);
        rootMatches = computedRoot === checkpoint.root_hash;
    }
    catch (error) {
        reason = `malformed proof: ${String(error)}`;
    }
    const { key, keyPinned } = chooseKey(checkpoint, pinnedKey);
    const signatureValid = key !== null && (await checkpointSignatureValid(checkpoint, key));
    const ok = leafMatches && rootMatches && signatureValid && keyPinned !== false;
    if (!reason) {
        reason = !leafMatches
            ? "the event's fields do not hash to the proof's leaf"
            : !rootMatches
                ? "the audit path does not lead to the checkpoint's root"
                : !signatureValid
                    ? "the checkpoint's signature does not verify"
                    : keyPinned === false
                        ? "the checkpoint is signed by another key than the pinned one"
                        : "verified";
    }
    return { ok, leafMatches, rootMatches, signatureValid, keyPinned, computedRoot, reason };
}
function safeBase64(text) {
    try {
        return base64ToBytes(text);
    }
    catch {
        return null;
    }
}
