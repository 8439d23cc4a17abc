/*
 * token_bucket: a rate limiter per client, written once for the CPU backend and the GPU.
 *
 * A bucket holds up to `capacity` tokens and gains `refill_per_sec` a second (device clock); a request takes
 * `cost` tokens if the bucket has them. A new (or restarted) limiter starts with a full bucket.
 *
 *   init:    tb_init    { uint32 client; uint32 capacity; uint32 refill_per_sec; }           12 bytes
 *   message: tb_request { uint32 op; uint32 cost; }                                           8 bytes
 *            op TB_OP_TAKE:   reply tb_reply { uint32 client; uint32 granted; uint32 tokens_left;
 *                                              uint32 reserved; uint64 granted_total; uint64 denied_total; }
 *            op TB_OP_LAYOUT: reply tb_layout (the sizes and offsets below, so the Rust side can check that
 *                                              its structs agree with these)
 *   errors:  a wrong-sized init fails the start (TB_ERR_BAD_INIT); a wrong-sized message or an unknown op is
 *            answered with an error reply (RV_ERR_BAD_ENVELOPE / TB_ERR_BAD_OP) and the limiter keeps running.
 */
#include "rv_behaviour.h"

#define TB_OP_TAKE 0u
#define TB_OP_LAYOUT 1u
#define TB_ERR_BAD_INIT (RV_ERR_USER_BASE + 1)
#define TB_ERR_BAD_OP (RV_ERR_USER_BASE + 2)
#define TB_MILLI 1000ull

typedef struct tb_init {
    uint32_t client;
    uint32_t capacity;
    uint32_t refill_per_sec;
} tb_init;

typedef struct tb_request {
    uint32_t op;
    uint32_t cost;
} tb_request;

typedef struct tb_reply {
    uint32_t client;
    uint32_t granted;
    uint32_t tokens_left;
    uint32_t reserved;
    uint64_t granted_total;
    uint64_t denied_total;
} tb_reply;

typedef struct tb_layout {
    uint32_t init_size;
    uint32_t request_size;
    uint32_t reply_size;
    uint32_t reply_offsets[6];
} tb_layout;

typedef struct tb_state {
    uint64_t last_ns;
    uint64_t milli_tokens;
    uint64_t granted;
    uint64_t denied;
    uint32_t client;
    uint32_t capacity;
    uint32_t refill_per_sec;
} tb_state;

RV_BEHAVIOUR_FN int tb_layout_reply(rv_actor_ctx *ctx) {
    tb_layout l;
    l.init_size = sizeof(tb_init);
    l.request_size = sizeof(tb_request);
    l.reply_size = sizeof(tb_reply);
    l.reply_offsets[0] = RV_OFFSETOF(tb_reply, client);
    l.reply_offsets[1] = RV_OFFSETOF(tb_reply, granted);
    l.reply_offsets[2] = RV_OFFSETOF(tb_reply, tokens_left);
    l.reply_offsets[3] = RV_OFFSETOF(tb_reply, reserved);
    l.reply_offsets[4] = RV_OFFSETOF(tb_reply, granted_total);
    l.reply_offsets[5] = RV_OFFSETOF(tb_reply, denied_total);
    return rv_reply(ctx, &l, sizeof(l));
}

RV_BEHAVIOUR_FN int token_bucket(rv_actor_ctx *ctx, const rv_envelope *msg) {
    tb_state *s = (tb_state *)rv_state(ctx);
    if (rv_state_bytes(ctx) < sizeof(tb_state)) return TB_ERR_BAD_INIT;
    uint64_t now = rv_monotonic_ns(ctx); /* durations: a clock that never steps */
    if (msg->kind == RV_KIND_INIT) {
        if (rv_payload_len(ctx, msg) != sizeof(tb_init)) return TB_ERR_BAD_INIT;
        tb_init init;
        rv_copy_bytes(&init, rv_payload(ctx, msg), sizeof(init));
        s->client = init.client;
        s->capacity = init.capacity;
        s->refill_per_sec = init.refill_per_sec;
        s->milli_tokens = (uint64_t)init.capacity * TB_MILLI;
        s->last_ns = now;
        return RV_OK;
    }
    uint32_t len = rv_payload_len(ctx, msg);
    if (len != sizeof(tb_request)) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, len);
    tb_request req;
    rv_copy_bytes(&req, rv_payload(ctx, msg), sizeof(req));
    if (req.op == TB_OP_LAYOUT) return tb_layout_reply(ctx);
    if (req.op != TB_OP_TAKE) return rv_reply_error(ctx, TB_ERR_BAD_OP, req.op);
    /* Refill for the time since the last request. */
    uint64_t elapsed = now > s->last_ns ? now - s->last_ns : 0;
    s->last_ns = now;
    uint64_t full = (uint64_t)s->capacity * TB_MILLI;
    uint64_t gained = elapsed / 1000000ull * s->refill_per_sec; /* milli-tokens: per ms, rate per s */
    s->milli_tokens = s->milli_tokens + gained > full ? full : s->milli_tokens + gained;
    uint64_t cost = (uint64_t)req.cost * TB_MILLI;
    uint32_t granted = cost <= s->milli_tokens ? 1u : 0u;
    if (granted) {
        s->milli_tokens -= cost;
        s->granted += 1;
    } else {
        s->denied += 1;
    }
    tb_reply r;
    r.client = s->client;
    r.granted = granted;
    r.tokens_left = (uint32_t)(s->milli_tokens / TB_MILLI);
    r.reserved = 0;
    r.granted_total = s->granted;
    r.denied_total = s->denied;
    return rv_reply(ctx, &r, sizeof(r));
}
