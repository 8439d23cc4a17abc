// sensor: anomaly detection over a stream of readings, Welford's running mean and variance
// (kernels/behaviours/sensor.cu, the same rules and the same state layout). Needs shader f64 (rv_f64.wgsl).
// State: alert_slot u32 @0, warmup u32 @4, threshold f64 @8, n u64 @16, mean f64 @24, m2 f64 @32,
// anomalies u64 @40. A reading: value f64 @0, flags u32 @8 (bit 0: planted), seq u32 @12. The reply (when the
// host asked): count u64, mean f64, variance f64, anomalies u64.
const SENSOR_PLANTED: u32 = 1u;
const SENSOR_ANOMALY: u32 = 1u;
const SENSOR_MISSED_WARMUP: u32 = 2u;
const SENSOR_MISSED_BELOW: u32 = 3u;
const SENSOR_NO_ALERTS: u32 = 0xFFFFFFFFu;

// Tells the aggregator (a kernel-to-kernel alert); a full aggregator inbox makes the reading wait (RV_STALL).
fn sensor_report(kind: u32, value: vec2<u32>, z2: f64, flags: u32, seq: u32) -> i32 {
    let to = rv_state_u32(0u);
    if (to == SENSOR_NO_ALERTS) { return RV_OK; }
    rv_out_set_u32(0u, kind);
    rv_out_set_u32(4u, rv_self());
    rv_out_set_u64(8u, value);
    rv_out_set_u64(16u, f64_bits(z2));
    rv_out_set_u32(24u, flags);
    rv_out_set_u32(28u, seq);
    let rc = rv_send(to, 32u);
    return select(rc, RV_STALL, rc == RV_ERR_K2K_FULL);
}

fn sensor_init() -> i32 {
    let len = rv_msg_len();
    rv_state_set_u32(0u, select(SENSOR_NO_ALERTS, rv_msg_u32(0u), len >= 4u));
    var warmup = select(0u, rv_msg_u32(4u), len >= 8u);
    if (warmup < 2u) { warmup = 32u; }
    rv_state_set_u32(4u, warmup);
    var threshold = 4.0lf;
    if (len >= 16u && f64_finite(rv_msg_u64(8u))) {
        let t = f64_from_bits(rv_msg_u64(8u));
        if (t > 0.0lf && t < 1e6lf) { threshold = t; }
    }
    rv_state_set_f64(8u, threshold);
    return RV_OK;
}

fn rv_behaviour_sensor() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) { return sensor_init(); }
    if (rv_msg_kind() == RV_KIND_K2K) { return RV_OK; } // sensors take no notifications
    if (rv_payload_len() < 16u) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, rv_payload_len()); }
    let bits = rv_payload_u64(0u);
    let flags = rv_payload_u32(8u);
    let seq = rv_payload_u32(12u);
    if (!f64_finite(bits)) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, 0u); }
    let x = f64_from_bits(bits);
    let planted = (flags & SENSOR_PLANTED) != 0u;
    let n = rv_state_u64(16u);
    let warm = n.y != 0u || n.x >= rv_state_u32(4u);
    var mean = rv_state_f64(24u);
    var m2 = rv_state_f64(32u);
    var z2 = 0.0lf;
    var anomaly = false;
    if (warm) {
        let variance = m2 / (f64_of_u64(n) - 1.0lf);
        let d = x - mean;
        if (variance > 0.0lf) {
            z2 = d * d / variance;
        } else if (d != 0.0lf) {
            z2 = 1e300lf;
        }
        let t = rv_state_f64(8u);
        if (z2 > t * t) {
            let rc = sensor_report(SENSOR_ANOMALY, bits, z2, flags, seq);
            if (rc != RV_OK) { return rc; }
            rv_state_set_u64(40u, u64_inc(rv_state_u64(40u)));
            anomaly = true;
        }
    }
    var count = n;
    if (!anomaly) {
        if (planted) {
            let rc = sensor_report(select(SENSOR_MISSED_WARMUP, SENSOR_MISSED_BELOW, warm), bits, z2, flags, seq);
            if (rc != RV_OK) { return rc; }
        }
        // Welford's update: the reading is normal (or the sensor is warming up).
        count = u64_inc(n);
        let d = x - mean;
        mean = mean + d / f64_of_u64(count);
        m2 = m2 + d * (x - mean);
        rv_state_set_u64(16u, count);
        rv_state_set_f64(24u, mean);
        rv_state_set_f64(32u, m2);
    }
    var variance = 0.0lf;
    if (count.y != 0u || count.x > 1u) { variance = m2 / (f64_of_u64(count) - 1.0lf); }
    rv_out_set_u64(0u, count);
    rv_out_set_u64(8u, f64_bits(mean));
    rv_out_set_u64(16u, f64_bits(variance));
    rv_out_set_u64(24u, rv_state_u64(40u));
    return rv_reply(32u);
}
