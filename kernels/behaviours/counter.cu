/*
 * counter: keeps a running sum.
 *   init:    optional int64 initial total (8 bytes);
 *   message: int64 delta in its first 8 bytes (8 to 96 bytes: the rest, e.g. the record the delta counts, is ignored);
 *   reply:   rv_counter_reply { int64 total; uint64 count } after adding the delta.
 * A message shorter than 8 bytes is answered with an RV_KIND_ERROR (RV_ERR_BAD_ENVELOPE); the actor keeps running.
 */
#include "../rv_behaviour.h"

typedef struct rv_counter_state {
    int64_t total;
    uint64_t count;
} rv_counter_state;

typedef struct rv_counter_reply {
    int64_t total;
    uint64_t count;
} rv_counter_reply;

RV_BEHAVIOUR_FN int rv_behaviour_counter(rv_actor_ctx *ctx, const rv_envelope *msg) {
    rv_counter_state *s = (rv_counter_state *)rv_state(ctx);
    if (msg->kind == RV_KIND_INIT) {
        if (msg->payload_len >= 8) s->total = (int64_t)rv_read_u64(msg->payload);
        return RV_OK;
    }
    if (msg->payload_len < 8) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, msg->payload_len);
    s->total += (int64_t)rv_read_u64(msg->payload);
    s->count += 1;
    rv_counter_reply r;
    r.total = s->total;
    r.count = s->count;
    return rv_reply(ctx, &r, sizeof(r));
}
