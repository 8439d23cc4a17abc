// test: the behaviour for fault tests (kernels/behaviours/test.cu). Init: optional u64 poison, optional i32 init
// result. A message whose first 8 bytes equal the poison fails with RV_ERR_POISON; otherwise op (first u32):
// 1 echo, 2 fail with code@4, 3 stall ns@8 then reply, 4 forward payload[8..] to slot@4, 5 clocks.
// Not here: the slow init (a busy wait on the clock): WGSL has no clock inside a dispatch, so the marker is
// ignored and the init completes at once.
const TEST_POISON: vec2<u32> = vec2<u32>(0xDEADDEADu, 0xDEADDEADu);

fn rv_behaviour_test() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) {
        var poison = TEST_POISON;
        if (rv_msg_len() >= 8u) { poison = rv_msg_u64(0u); }
        rv_state_set_u64(0u, poison);
        var init_result = RV_OK;
        if (rv_msg_len() >= 12u) { init_result = bitcast<i32>(rv_msg_u32(8u)); }
        return select(RV_OK, init_result, init_result > 0);
    }
    let n = rv_payload_len();
    if (n >= 8u && u64_eq(rv_payload_u64(0u), rv_state_u64(0u))) { return RV_ERR_POISON; }
    if (n < 4u) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, n); }
    let op = rv_payload_u32(0u);
    if (op == 1u) { return rv_reply_payload(0u); }
    if (op == 2u) {
        var code = 0u;
        if (n >= 8u) { code = rv_payload_u32(4u); }
        if (code == 0u || code > 0x7FFFFFFFu) { return RV_ERR_USER_BASE; }
        return bitcast<i32>(code);
    }
    if (op == 3u && n >= 16u) {
        rv_stall_for(rv_payload_u64(8u));
        return rv_reply_payload(0u);
    }
    if (op == 4u && n >= 8u) {
        let dst = rv_payload_u32(4u);
        let rc = rv_forward_payload(dst, 8u);
        if (rc == RV_ERR_K2K_FULL) { return RV_STALL; }
        if (rc != RV_OK) { return rv_reply_error(rc, dst); }
        return RV_OK;
    }
    if (op == 5u) {
        rv_out_set_u64(0u, rv_clock_ns());
        rv_out_set_u64(8u, rv_monotonic_ns());
        return rv_reply(16u);
    }
    return rv_reply_error(RV_ERR_BAD_ENVELOPE, op);
}
