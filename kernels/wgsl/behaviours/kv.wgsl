// kv: a key-value store in the state region (kernels/behaviours/kv.cu: open addressing, linear probing,
// tombstones). Request { op: u32, reserved: u32, key: u64, value: u64 } (24 bytes), reply { status: u32,
// reserved: u32, value: u64 }; entries { key: u64, value: u64, used: u32, reserved: u32 } (24 bytes).
const KV_PUT: u32 = 1u;
const KV_GET: u32 = 2u;
const KV_DELETE: u32 = 3u;
const KV_OK: u32 = 0u;
const KV_REPLACED: u32 = 1u;
const KV_FULL: u32 = 2u;
const KV_NOT_FOUND: u32 = 3u;
const KV_USED: u32 = 1u;
const KV_TOMBSTONE: u32 = 2u;
const KV_EMPTY: u32 = 0u;
const KV_ENTRY: u32 = 24u;

fn rv_kv_hash(v: vec2<u32>) -> vec2<u32> {
    var x = u64_add(v, vec2<u32>(0x7F4A7C15u, 0x9E3779B9u));
    x = u64_mul(u64_xor(x, u64_shr(x, 30u)), vec2<u32>(0x1CE4E5B9u, 0xBF58476Du));
    x = u64_mul(u64_xor(x, u64_shr(x, 27u)), vec2<u32>(0x133111EBu, 0x94D049BBu));
    return u64_xor(x, u64_shr(x, 31u));
}

fn rv_kv_reply(status: u32, value: vec2<u32>) -> i32 {
    rv_out_set_u32(0u, status);
    rv_out_set_u32(4u, 0u);
    rv_out_set_u64(8u, value);
    return rv_reply(16u);
}

fn rv_behaviour_kv() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) { return RV_OK; }
    if (rv_msg_len() != 24u) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, rv_msg_len()); }
    let op = rv_msg_u32(0u);
    let key = rv_msg_u64(8u);
    let value = rv_msg_u64(16u);
    let n = rv_state_bytes() / KV_ENTRY;
    if (op != KV_PUT && op != KV_GET && op != KV_DELETE) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, op); }
    let start = u64_mod_u32(rv_kv_hash(key), n);
    var free_at = RV_NO_INDEX;
    for (var i = 0u; i < n; i = i + 1u) {
        let at = ((start + i) % n) * KV_ENTRY;
        let used = rv_state_u32(at + 16u);
        if (used == KV_USED && u64_eq(rv_state_u64(at), key)) {
            let old = rv_state_u64(at + 8u);
            if (op == KV_PUT) {
                rv_state_set_u64(at + 8u, value);
                return rv_kv_reply(KV_REPLACED, old);
            }
            if (op == KV_DELETE) { rv_state_set_u32(at + 16u, KV_TOMBSTONE); }
            return rv_kv_reply(KV_OK, old);
        }
        if (used != KV_USED && free_at == RV_NO_INDEX) { free_at = (start + i) % n; }
        if (used == KV_EMPTY) { break; }
    }
    if (op == KV_PUT) {
        if (free_at == RV_NO_INDEX) { return rv_kv_reply(KV_FULL, vec2<u32>(0u, 0u)); }
        let at = free_at * KV_ENTRY;
        rv_state_set_u64(at, key);
        rv_state_set_u64(at + 8u, value);
        rv_state_set_u32(at + 16u, KV_USED);
        return rv_kv_reply(KV_OK, vec2<u32>(0u, 0u));
    }
    return rv_kv_reply(KV_NOT_FOUND, vec2<u32>(0u, 0u));
}
