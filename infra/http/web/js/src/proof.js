// Checks an inclusion proof in the browser or Node with WebCrypto alone
// (SHA-256 and Ed25519), by the formats of docs/transparency.md: rebuild the
// leaf from the event's fields, walk the audit path to the root (RFC 9162
// 2.1.3.2), compare with the checkpoint's root, verify the checkpoint's
// signature. Nothing here trusts the server's own verification.
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
/** The exact bytes a checkpoint's signature covers. */
export function signedMessage(checkpoint) {
    const lines = [
        "turnledger-checkpoint/v1",
        checkpoint.origin,
        String(checkpoint.tree_size),
        checkpoint.root_hash,
        checkpoint.timestamp,
    ];
    return encoder.encode(lines.map((line) => `${line}\n`).join(""));
}
export async function checkpointSignatureValid(checkpoint, publicKey) {
    try {
        const key = await globalThis.crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
        return await globalThis.crypto.subtle.verify({ name: "Ed25519" }, key, base64ToBytes(checkpoint.signature), signedMessage(checkpoint));
    }
    catch {
        return false;
    }
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
    const embedded = safeBase64(checkpoint.public_key);
    const pinned = pinnedKey === null || pinnedKey.trim() === "" ? null : safeBase64(pinnedKey.trim());
    const keyPinned = pinned === null ? null : embedded !== null && bytesToHex(pinned) === bytesToHex(embedded);
    const key = pinned ?? embedded;
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
