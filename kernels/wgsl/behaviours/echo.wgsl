// echo: replies with the payload it received, of any size (kernels/behaviours/echo.cu). A large reply that finds
// no room in the outbox's bulk area waits (RV_STALL) until the host has read earlier ones.
fn rv_behaviour_echo() -> i32 {
    if (rv_msg_kind() == RV_KIND_INIT) { return RV_OK; }
    let rc = rv_reply_payload(0u);
    return select(rc, RV_STALL, rc == RV_ERR_OUTBOX_FULL);
}
