// counter: a running sum (kernels/behaviours/counter.cu). State { total: i64 @0, count: u64 @8 }; a message's
// first 8 bytes are an i64 delta; the reply is { total, count }. Shorter than 8 bytes: RV_ERR_BAD_ENVELOPE reply.
fn rv_behaviour_counter() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) {
        if (rv_msg_len() >= 8u) { rv_state_set_u64(0u, rv_msg_u64(0u)); }
        return RV_OK;
    }
    if (rv_msg_len() < 8u) { return rv_reply_error(RV_ERR_BAD_ENVELOPE, rv_msg_len()); }
    let total = u64_add(rv_state_u64(0u), rv_msg_u64(0u)); // two's complement: an i64 sum is a u64 sum
    let count = u64_inc(rv_state_u64(8u));
    rv_state_set_u64(0u, total);
    rv_state_set_u64(8u, count);
    rv_out_set_u64(0u, total);
    rv_out_set_u64(8u, count);
    return rv_reply(16u);
}
