/*
 * test: a behaviour for fault tests. Messages of any size (payloads read with rv_payload).
 *   init:    optional uint64 poison value (default RV_TEST_DEFAULT_POISON), then an optional int32 init result
 *            (non-zero: creation fails with that code), then optionally the marker RV_TEST_SLOW_INIT and a
 *            uint64 busy time in ns (the init spins that long, at most RV_TEST_SLOW_INIT_MAX_NS: a slow
 *            initialisation; the marker keeps random init bytes from making one);
 *   a message whose first 8 bytes equal the poison value fails the actor with RV_ERR_POISON;
 *   otherwise the first uint32 is an op:
 *     1 echo             reply with the payload
 *     2 fail   code:u32  fail with that code (RV_ERR_USER_BASE if 0)
 *     3 stall  ns:u64@8  reply, then make no progress (and no heartbeat) for ns nanoseconds or until killed
 *     4 forward dst:u32  forward payload[8..] to dst (a slot, or a routed address); dst answers the host (a full
 *                        queue: RV_STALL, the message is offered again; another error: answered with it)
 *     5 clocks           reply { rv_clock_ns: u64, rv_monotonic_ns: u64 }
 *     6 spin             never returns: spins on a state word nothing writes (a behaviour stuck for good, as a
 *                        user's `while (*flag == 0) {}` is; not in the WGSL version: a dispatch that never ends)
 *   any other op is answered with an RV_KIND_ERROR.
 */
#include "../rv_behaviour.h"

#define RV_TEST_DEFAULT_POISON 0xDEADDEADDEADDEADull
#define RV_TEST_ECHO 1u
#define RV_TEST_FAIL 2u
#define RV_TEST_STALL 3u
#define RV_TEST_FORWARD 4u
#define RV_TEST_CLOCKS 5u
#define RV_TEST_SPIN 6u
#define RV_TEST_SLOW_INIT 0x574F4C53u /* "SLOW" */
#define RV_TEST_SLOW_INIT_MAX_NS 10000000000ull

typedef struct rv_test_state {
    uint64_t poison;
    uint32_t never_set; /* op 6 spins until this is non-zero: nothing ever writes it */
} rv_test_state;

RV_BEHAVIOUR_FN int rv_behaviour_test(rv_actor_ctx *ctx, const rv_envelope *msg) {
    rv_test_state *s = (rv_test_state *)rv_state(ctx);
    if (msg->kind == RV_KIND_INIT) {
        s->poison = msg->payload_len >= 8 ? rv_read_u64(msg->payload) : RV_TEST_DEFAULT_POISON;
        int init_result = msg->payload_len >= 12 ? (int)rv_read_u32(msg->payload + 8) : RV_OK;
        if (msg->payload_len >= 24 && rv_read_u32(msg->payload + 12) == RV_TEST_SLOW_INIT) {
            uint64_t busy = rv_read_u64(msg->payload + 16);
            uint64_t until = rv_clock_ns(ctx) + (busy < RV_TEST_SLOW_INIT_MAX_NS ? busy : RV_TEST_SLOW_INIT_MAX_NS);
            while (rv_clock_ns(ctx) < until) {
            }
        }
        return init_result > 0 ? init_result : RV_OK;
    }
    const uint8_t *p = rv_payload(ctx, msg); /* messages of any size (large ones in the bulk area) */
    uint32_t n = rv_payload_len(ctx, msg);
    if (n >= 8 && rv_read_u64(p) == s->poison) return RV_ERR_POISON;
    if (n < 4) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, n);
    uint32_t op = rv_read_u32(p);
    if (op == RV_TEST_ECHO) return rv_reply(ctx, p, n);
    if (op == RV_TEST_FAIL) {
        uint32_t code = n >= 8 ? rv_read_u32(p + 4) : 0;
        return (code == 0 || code > 0x7FFFFFFFu) ? RV_ERR_USER_BASE : (int)code;
    }
    if (op == RV_TEST_STALL && n >= 16) {
        rv_stall_for(ctx, rv_read_u64(p + 8));
        return rv_reply(ctx, p, n);
    }
    if (op == RV_TEST_FORWARD && n >= 8) {
        uint32_t dst = rv_read_u32(p + 4);
        int rc = rv_forward(ctx, dst, p + 8, n - 8u);
        if (rc == RV_ERR_K2K_FULL) return RV_STALL; /* no room now: offered again later */
        if (rc != RV_OK) return rv_reply_error(ctx, rc, dst);
        return RV_OK;
    }
    if (op == RV_TEST_SPIN) {
        volatile const uint32_t *never = &s->never_set;
        while (*never == 0) {
        }
        return RV_OK;
    }
    if (op == RV_TEST_CLOCKS) {
        uint64_t clocks[2] = {rv_clock_ns(ctx), rv_monotonic_ns(ctx)};
        return rv_reply(ctx, clocks, sizeof(clocks));
    }
    return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, op);
}
