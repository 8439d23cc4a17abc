// alerts: the aggregator of sensor alerts (kernels/behaviours/alerts.cu). State: six u64 totals (anomalies,
// planted detected, false alarms, missed in warm-up, missed below threshold, last sensor). A kernel-to-kernel
// alert (32 bytes: kind u32, sensor u32, value f64, z^2 f64, flags u32, seq u32) is counted by kind; anything
// shorter is ignored. A host message (any payload) is answered with the totals.
fn alerts_bump(at: u32) { rv_state_set_u64(at, u64_inc(rv_state_u64(at))); }

fn rv_behaviour_alerts() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) { return RV_OK; }
    if (rv_msg_kind() == RV_KIND_K2K) {
        if (rv_payload_len() < 32u) { return RV_OK; }
        let kind = rv_payload_u32(0u);
        let flags = rv_payload_u32(24u);
        if (kind == 1u) {
            alerts_bump(0u);
            alerts_bump(select(16u, 8u, (flags & 1u) != 0u));
            rv_state_set_u64(40u, u64_of(rv_payload_u32(4u)));
        } else if (kind == 2u) {
            alerts_bump(24u);
        } else if (kind == 3u) {
            alerts_bump(32u);
        }
        return RV_OK;
    }
    for (var at = U.zero; at < 48u; at = at + 8u) { rv_out_set_u64(at, rv_state_u64(at)); }
    return rv_reply(48u);
}
