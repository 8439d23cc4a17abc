/*
 * alerts: the aggregator of `sensor` alerts.
 *   kernel-to-kernel: rv_sensor_alert (see sensor.cu), counted by kind and by the planted flag.
 *   message (host, any payload): replies rv_alerts_totals.
 */
#include "../rv_behaviour.h"

typedef struct rv_alerts_totals {
    uint64_t anomalies;        /* every anomaly a sensor flagged */
    uint64_t planted_detected; /* ... of which planted */
    uint64_t false_alarms;     /* ... of which not planted */
    uint64_t missed_warmup;    /* planted readings a sensor saw while warming up (after a (re)start) */
    uint64_t missed_below;     /* planted readings within a sensor's threshold */
    uint64_t last_sensor;      /* the slot of the last sensor that flagged an anomaly */
} rv_alerts_totals;

RV_BEHAVIOUR_FN int rv_behaviour_alerts(rv_actor_ctx *ctx, const rv_envelope *msg) {
    rv_alerts_totals *t = (rv_alerts_totals *)rv_state(ctx);
    if (msg->kind == RV_KIND_INIT) return RV_OK;
    if (msg->kind == RV_KIND_K2K) {
        if (msg->payload_len < 32) return RV_OK; /* not an alert: ignored */
        uint32_t kind = rv_read_u32(msg->payload);
        uint32_t flags = rv_read_u32(msg->payload + 24);
        if (kind == 1u) {
            t->anomalies += 1;
            if (flags & 1u) t->planted_detected += 1;
            else t->false_alarms += 1;
            t->last_sensor = rv_read_u32(msg->payload + 4);
        } else if (kind == 2u) {
            t->missed_warmup += 1;
        } else if (kind == 3u) {
            t->missed_below += 1;
        }
        return RV_OK;
    }
    return rv_reply(ctx, t, sizeof(*t));
}
