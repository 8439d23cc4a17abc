/*
 * kv: a key-value store in the state region (open addressing, linear probing, tombstones).
 *   message: rv_kv_request { uint32 op; uint32 reserved; uint64 key; uint64 value }  (24 bytes)
 *            op 1 = put, 2 = get, 3 = delete
 *   reply:   rv_kv_reply { uint32 status; uint32 reserved; uint64 value }
 *            status 0 = ok (put: inserted, get: found, delete: deleted), 1 = replaced (put; value = old),
 *            2 = full (put), 3 = not found (get, delete)
 * The table holds state_bytes / 24 entries.
 */
#include "../rv_behaviour.h"

#define RV_KV_PUT 1u
#define RV_KV_GET 2u
#define RV_KV_DELETE 3u
#define RV_KV_OK 0u
#define RV_KV_REPLACED 1u
#define RV_KV_FULL 2u
#define RV_KV_NOT_FOUND 3u

#define RV_KV_EMPTY 0u
#define RV_KV_USED 1u
#define RV_KV_TOMBSTONE 2u

typedef struct rv_kv_request {
    uint32_t op;
    uint32_t reserved;
    uint64_t key;
    uint64_t value;
} rv_kv_request;

typedef struct rv_kv_reply {
    uint32_t status;
    uint32_t reserved;
    uint64_t value;
} rv_kv_reply;

typedef struct rv_kv_entry {
    uint64_t key;
    uint64_t value;
    uint32_t used;
    uint32_t reserved;
} rv_kv_entry;

RV_FN uint64_t rv_kv_hash(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

RV_BEHAVIOUR_FN int rv_behaviour_kv(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (msg->kind == RV_KIND_INIT) return RV_OK;
    if (msg->payload_len != sizeof(rv_kv_request)) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, msg->payload_len);
    rv_kv_request req;
    rv_copy_bytes(&req, msg->payload, sizeof(req));
    rv_kv_entry *table = (rv_kv_entry *)rv_state(ctx);
    uint32_t n = rv_state_bytes(ctx) / (uint32_t)sizeof(rv_kv_entry);
    rv_kv_reply rep;
    rep.status = RV_KV_NOT_FOUND;
    rep.reserved = 0;
    rep.value = 0;
    if (req.op != RV_KV_PUT && req.op != RV_KV_GET && req.op != RV_KV_DELETE)
        return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, req.op);
    uint32_t start = (uint32_t)(rv_kv_hash(req.key) % n);
    uint32_t free_at = RV_NO_INDEX;
    for (uint32_t i = 0; i < n; ++i) {
        rv_kv_entry *e = &table[(start + i) % n];
        if (e->used == RV_KV_USED && e->key == req.key) {
            rep.value = e->value;
            if (req.op == RV_KV_PUT) {
                rep.status = RV_KV_REPLACED;
                e->value = req.value;
            } else {
                rep.status = RV_KV_OK;
                if (req.op == RV_KV_DELETE) e->used = RV_KV_TOMBSTONE;
            }
            return rv_reply(ctx, &rep, sizeof(rep));
        }
        if (e->used != RV_KV_USED && free_at == RV_NO_INDEX) free_at = (start + i) % n;
        if (e->used == RV_KV_EMPTY) break;
    }
    if (req.op == RV_KV_PUT) {
        if (free_at == RV_NO_INDEX) {
            rep.status = RV_KV_FULL;
        } else {
            rv_kv_entry *e = &table[free_at];
            e->key = req.key;
            e->value = req.value;
            e->used = RV_KV_USED;
            rep.status = RV_KV_OK;
        }
    }
    return rv_reply(ctx, &rep, sizeof(rep));
}
