/* echo: replies with the payload it received. No state. */
#include "../rv_behaviour.h"

RV_BEHAVIOUR_FN int rv_behaviour_echo(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (msg->kind == RV_KIND_INIT) return RV_OK;
    return rv_reply(ctx, msg->payload, msg->payload_len);
}
