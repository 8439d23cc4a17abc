/* echo: replies with the payload it received, of any size. No state. A large reply that finds no room in the
 * outbox's bulk area waits (RV_STALL) until the host has read earlier ones. */
#include "../rv_behaviour.h"

RV_BEHAVIOUR_FN int rv_behaviour_echo(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (msg->kind == RV_KIND_INIT) return RV_OK;
    int rc = rv_reply(ctx, rv_payload(ctx, msg), rv_payload_len(ctx, msg));
    return rc == RV_ERR_OUTBOX_FULL ? RV_STALL : rc;
}
