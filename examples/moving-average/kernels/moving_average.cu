/*
 * moving_average: a user behaviour, written once for the CPU backend and the GPU.
 *
 * Keeps the running mean and variance of a stream of readings (Welford) and flags readings whose z-score is
 * past a threshold. Each anomaly is reported to an aggregator actor with a kernel-to-kernel message carrying
 * the int64 value 1 (so a built-in `counter` counts them).
 *
 *   init:    ma_init { uint32 aggregator_slot; float threshold; }
 *   message: double reading (8 bytes)
 *   reply:   ma_reply { double mean; double variance; uint64 count; uint32 anomaly; uint32 reserved; }
 */
#include "rv_behaviour.h"

typedef struct ma_init {
    uint32_t aggregator;
    float threshold;
} ma_init;

typedef struct ma_state {
    uint64_t count;
    double mean;
    double m2;
    uint32_t aggregator;
    float threshold;
} ma_state;

typedef struct ma_reply {
    double mean;
    double variance;
    uint64_t count;
    uint32_t anomaly;
    uint32_t reserved;
} ma_reply;

RV_BEHAVIOUR_FN int moving_average(rv_actor_ctx *ctx, const rv_envelope *msg) {
    ma_state *s = (ma_state *)rv_state(ctx);
    if (msg->kind == RV_KIND_INIT) {
        if (rv_payload_len(ctx, msg) != sizeof(ma_init)) return RV_ERR_USER_BASE + 1; /* bad init: creation fails */
        ma_init init;
        rv_copy_bytes(&init, rv_payload(ctx, msg), sizeof(init));
        s->aggregator = init.aggregator;
        s->threshold = init.threshold;
        return RV_OK;
    }
    uint32_t len = rv_payload_len(ctx, msg);
    if (len != sizeof(double)) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, len);
    double x;
    rv_copy_bytes(&x, rv_payload(ctx, msg), sizeof(x));
    uint32_t anomaly = 0;
    if (s->count >= 8) {
        double variance = s->m2 / (double)(s->count - 1);
        double d = x - s->mean;
        double t = (double)s->threshold;
        anomaly = d * d > t * t * variance ? 1u : 0u;
    }
    if (anomaly) {
        int64_t one = 1;
        int rc = rv_send(ctx, s->aggregator, &one, sizeof(one));
        if (rc != RV_OK) return rv_reply_error(ctx, rc, s->aggregator);
    } else {
        /* anomalies do not pollute the statistics */
        s->count += 1;
        double delta = x - s->mean;
        s->mean += delta / (double)s->count;
        s->m2 += delta * (x - s->mean);
    }
    ma_reply r;
    r.mean = s->mean;
    r.variance = s->count > 1 ? s->m2 / (double)(s->count - 1) : 0.0;
    r.count = s->count;
    r.anomaly = anomaly;
    r.reserved = 0;
    return rv_reply(ctx, &r, sizeof(r));
}
