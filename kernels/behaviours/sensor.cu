/*
 * sensor: anomaly detection over a stream of readings (Welford's running mean and variance).
 *   init:    rv_sensor_init { uint32 alert_slot; uint32 warmup; double threshold }  (16 bytes; warmup 0 = 32,
 *            threshold <= 0 = 4.0; fewer than 4 bytes: the sensor reports to nobody)
 *   message: rv_sensor_reading { double value; uint32 flags; uint32 seq }  (16 bytes)
 *            flags bit 0 = planted: ground truth for accounting, never used for detection.
 *   reply (only if the host asked): rv_sensor_stats { uint64 count; double mean; double variance; uint64 anomalies }
 * After `warmup` readings, a reading whose z-score |x - mean| / sd exceeds the threshold is an anomaly: it is
 * sent to the `alerts` actor in alert_slot as a kernel-to-kernel rv_sensor_alert and is not folded into the
 * statistics. Planted readings that were not flagged (during warm-up, or within the threshold) are reported
 * as misses, so planted = detected + missed exactly. An alert that does not fit the aggregator's inbox makes
 * the reading wait (RV_STALL: offered again later, state untouched). A reading shorter than 16 bytes, or not
 * a finite number, is answered with an RV_KIND_ERROR (RV_ERR_BAD_ENVELOPE); the sensor keeps running.
 */
#include "../rv_behaviour.h"

#define RV_SENSOR_PLANTED 1u
#define RV_ALERT_ANOMALY 1u
#define RV_ALERT_MISSED_WARMUP 2u
#define RV_ALERT_MISSED_BELOW 3u
#define RV_SENSOR_NO_ALERTS 0xFFFFFFFFu

typedef struct rv_sensor_state {
    uint32_t alert_slot;
    uint32_t warmup;
    double threshold;
    uint64_t n;
    double mean;
    double m2;
    uint64_t anomalies;
} rv_sensor_state;

typedef struct rv_sensor_stats {
    uint64_t count;
    double mean;
    double variance;
    uint64_t anomalies;
} rv_sensor_stats;

/* What a sensor tells the aggregator (32 bytes). */
typedef struct rv_sensor_alert {
    uint32_t kind;
    uint32_t sensor;
    double value;
    double z_squared;
    uint32_t flags;
    uint32_t seq;
} rv_sensor_alert;

RV_FN int rv_sensor_report(rv_actor_ctx *ctx, const rv_sensor_state *s, uint32_t kind, double value, double z2,
                           uint32_t flags, uint32_t seq) {
    if (s->alert_slot == RV_SENSOR_NO_ALERTS) return RV_OK;
    rv_sensor_alert a;
    a.kind = kind;
    a.sensor = rv_self(ctx);
    a.value = value;
    a.z_squared = z2;
    a.flags = flags;
    a.seq = seq;
    int rc = rv_send(ctx, s->alert_slot, &a, sizeof(a));
    return rc == RV_ERR_K2K_FULL ? RV_STALL : rc;
}

RV_BEHAVIOUR_FN int rv_behaviour_sensor(rv_actor_ctx *ctx, const rv_envelope *msg) {
    rv_sensor_state *s = (rv_sensor_state *)rv_state(ctx);
    if (msg->kind == RV_KIND_INIT) {
        s->alert_slot = msg->payload_len >= 4 ? rv_read_u32(msg->payload) : RV_SENSOR_NO_ALERTS;
        s->warmup = msg->payload_len >= 8 ? rv_read_u32(msg->payload + 4) : 0;
        if (s->warmup < 2) s->warmup = 32;
        s->threshold = 4.0;
        if (msg->payload_len >= 16) {
            double t;
            rv_copy_bytes(&t, msg->payload + 8, 8);
            if (t > 0.0 && t < 1e6) s->threshold = t;
        }
        return RV_OK;
    }
    if (msg->kind == RV_KIND_K2K) return RV_OK; /* sensors take no notifications */
    if (msg->payload_len < 16) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, msg->payload_len);
    double x;
    rv_copy_bytes(&x, msg->payload, 8);
    uint32_t flags = rv_read_u32(msg->payload + 8);
    uint32_t seq = rv_read_u32(msg->payload + 12);
    if (!(x - x == 0.0)) return rv_reply_error(ctx, RV_ERR_BAD_ENVELOPE, 0); /* NaN or infinite */
    int planted = (flags & RV_SENSOR_PLANTED) != 0;
    double z2 = 0.0;
    if (s->n >= s->warmup) {
        double variance = s->m2 / (double)(s->n - 1);
        double d = x - s->mean;
        z2 = variance > 0.0 ? d * d / variance : (d != 0.0 ? 1e300 : 0.0);
        if (z2 > s->threshold * s->threshold) {
            int rc = rv_sensor_report(ctx, s, RV_ALERT_ANOMALY, x, z2, flags, seq);
            if (rc != RV_OK) return rc;
            s->anomalies += 1;
            goto reply;
        }
    }
    if (planted) {
        uint32_t kind = s->n >= s->warmup ? RV_ALERT_MISSED_BELOW : RV_ALERT_MISSED_WARMUP;
        int rc = rv_sensor_report(ctx, s, kind, x, z2, flags, seq);
        if (rc != RV_OK) return rc;
    }
    /* Welford's update: the reading is normal (or the sensor is warming up). */
    s->n += 1;
    {
        double d = x - s->mean;
        s->mean += d / (double)s->n;
        s->m2 += d * (x - s->mean);
    }
reply : {
    rv_sensor_stats r;
    r.count = s->n;
    r.mean = s->mean;
    r.variance = s->n > 1 ? s->m2 / (double)(s->n - 1) : 0.0;
    r.anomalies = s->anomalies;
    return rv_reply(ctx, &r, sizeof(r));
}
}
