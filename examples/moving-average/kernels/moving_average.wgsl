// moving_average for the wgpu backend: the WGSL version of moving_average.cu, the same rules, the same init,
// message and reply bytes (the example's test runs both and compares every reply). Computes in f64, so it runs
// where the adapter has shader f64 (rv_f64.wgsl's helpers read and write f64 bits).
//
//   init:    ma_init { u32 aggregator @0; f32 threshold @4 }                                  (8 bytes)
//   message: f64 reading @0                                                                     (8 bytes)
//   reply:   ma_reply { f64 mean @0; f64 variance @8; u64 count @16; u32 anomaly @24; u32 reserved @28 }
//   state:   ma_state { u64 count @0; f64 mean @8; f64 m2 @16; u32 aggregator @24; f32 threshold @28 }

const MA_COUNT: u32 = 0u;
const MA_MEAN: u32 = 8u;
const MA_M2: u32 = 16u;
const MA_AGGREGATOR: u32 = 24u;
const MA_THRESHOLD: u32 = 28u;

fn moving_average_init() -> i32 {
    if (rv_msg_len() != 8u) { return RV_ERR_USER_BASE + 1; } // bad init: creation fails
    rv_state_set_u32(MA_AGGREGATOR, rv_msg_u32(0u));
    rv_state_set_u32(MA_THRESHOLD, rv_msg_u32(4u));
    return RV_OK;
}

fn moving_average() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) { return moving_average_init(); }
    if (rv_payload_len() != 8u) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, rv_payload_len()); }
    let x = f64_from_bits(rv_payload_u64(0u));
    var count = rv_state_u64(MA_COUNT);
    var mean = rv_state_f64(MA_MEAN);
    var m2 = rv_state_f64(MA_M2);
    var anomaly = 0u;
    if (count.y != 0u || count.x >= 8u) {
        let variance = m2 / (f64_of_u64(count) - 1.0lf);
        let d = x - mean;
        let t = f64(bitcast<f32>(rv_state_u32(MA_THRESHOLD)));
        anomaly = select(0u, 1u, d * d > t * t * variance);
    }
    if (anomaly != 0u) {
        // A kernel-to-kernel message carrying the int64 1, for the aggregator (a built-in counter) to count.
        rv_out_set_u64(0u, vec2<u32>(1u, 0u));
        let to = rv_state_u32(MA_AGGREGATOR);
        let rc = rv_send(to, 8u);
        if (rc != RV_OK) { return rv_reply_error(rc, to); }
    } else {
        // Anomalies do not pollute the statistics.
        count = u64_inc(count);
        let delta = x - mean;
        mean = mean + delta / f64_of_u64(count);
        m2 = m2 + delta * (x - mean);
        rv_state_set_u64(MA_COUNT, count);
        rv_state_set_f64(MA_MEAN, mean);
        rv_state_set_f64(MA_M2, m2);
    }
    var variance = 0.0lf;
    if (count.y != 0u || count.x > 1u) { variance = m2 / (f64_of_u64(count) - 1.0lf); }
    rv_out_set_u64(0u, f64_bits(mean));
    rv_out_set_u64(8u, f64_bits(variance));
    rv_out_set_u64(16u, count);
    rv_out_set_u32(24u, anomaly);
    rv_out_set_u32(28u, 0u);
    return rv_reply(32u);
}
