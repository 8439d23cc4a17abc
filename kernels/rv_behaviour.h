/*
 * rv_behaviour.h - what a behaviour (built-in or user-written) sees.
 *
 * A behaviour is one device function:
 *
 *     RV_BEHAVIOUR_FN int my_behaviour(rv_actor_ctx *ctx, const rv_envelope *msg);
 *
 * called once with msg->kind == RV_KIND_INIT when the slot is (re)created (payload = the init bytes; the state
 * region is zeroed before), then once per message (RV_KIND_USER from the host, RV_KIND_K2K from another actor).
 * It returns RV_OK, RV_STALL ("not now": the message stays queued and is offered again later), or a failure
 * code > 0, which moves the slot to Failed. Each message is a transaction: a reply and kernel-to-kernel sends
 * are published only if the behaviour returns RV_OK, and discarded otherwise.
 */
#ifndef RV_BEHAVIOUR_H
#define RV_BEHAVIOUR_H

#include "rv_layout.h"

/* User behaviours take ids from RV_FIRST_USER_BEHAVIOUR to RV_MAX_BEHAVIOURS - 1; the built-ins' are listed in
 * rv_builtins.h. */
#define RV_FIRST_USER_BEHAVIOUR 16u

#if RV_CUDA
#define RV_BEHAVIOUR_FN __device__ static
#else
#define RV_BEHAVIOUR_FN static
#endif

typedef struct rv_actor_ctx rv_actor_ctx;
typedef int (*rv_behaviour_fn)(rv_actor_ctx *ctx, const rv_envelope *msg);

/* The behaviour's state region (zeroed at every (re)creation) and its size in bytes. */
RV_API void *rv_state(rv_actor_ctx *ctx);
RV_API uint32_t rv_state_bytes(rv_actor_ctx *ctx);
/* This actor's slot index and generation. */
RV_API uint32_t rv_self(rv_actor_ctx *ctx);
RV_API uint32_t rv_generation(rv_actor_ctx *ctx);
/* Device clock, nanoseconds, in the host's real-time domain (CLOCK_REALTIME: it steps when the host's clock is
 * set). For durations and rates use rv_monotonic_ns. */
RV_API uint64_t rv_clock_ns(rv_actor_ctx *ctx);
/* A clock that never steps, nanoseconds from an arbitrary origin (CLOCK_MONOTONIC on the CPU backend, the
 * GPU's global timer on CUDA): differences only. */
RV_API uint64_t rv_monotonic_ns(rv_actor_ctx *ctx);
/* The message's payload and its length. A payload over RV_PAYLOAD_BYTES (a "large" message, flag
 * RV_FLAG_BULK) lies outside the envelope, in the slot's bulk area: read every payload through these two and a
 * behaviour takes messages of any size. Valid while the behaviour runs for this message. */
RV_API const uint8_t *rv_payload(rv_actor_ctx *ctx, const rv_envelope *msg);
RV_API uint32_t rv_payload_len(rv_actor_ctx *ctx, const rv_envelope *msg);
/* The largest payload rv_reply, rv_send and rv_forward take on this device: RV_PAYLOAD_BYTES, or the bulk areas'
 * size (DeviceConfig::bulk_bytes) when that is larger. */
RV_API uint32_t rv_max_payload(rv_actor_ctx *ctx);
/* Reply to the host (at most once per message; a no-op when the sender asked for no reply). A large reply
 * returns RV_ERR_OUTBOX_FULL while the host has not yet read enough earlier ones: return RV_STALL and the
 * message is offered again. */
RV_API int rv_reply(rv_actor_ctx *ctx, const void *payload, uint32_t len);
/* Answer the host with an error code instead of a reply (same rules as rv_reply). */
RV_API int rv_reply_error(rv_actor_ctx *ctx, int32_t code, uint32_t detail);
/* Send a notification to another actor's kernel-to-kernel inbox (at most RV_MAX_SENDS_PER_MESSAGE sends per
 * message): `destination` is a slot of this device, or a routed address (rv_address) of an actor on any device of
 * the runtime. The receiver cannot reply to the host about it. Returns RV_ERR_SLOT_RANGE,
 * RV_ERR_PAYLOAD_TOO_LARGE, RV_ERR_LIMIT or RV_ERR_K2K_FULL on failure (K2K_FULL: no cell, or for a large
 * payload no bulk room or another large send in progress, now: return RV_STALL to try again). */
RV_API int rv_send(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len);
/* The routed address of the actor in `slot` of device `device` (the index of the device in the host's runtime):
 * rv_send and rv_forward to it go through the host, to any device of the runtime (this one included). A routed
 * send takes a cell of the sender's outbox until the host has read it (RV_ERR_K2K_FULL while the outbox has no
 * cell to spare: return RV_STALL), carries at most RV_PAYLOAD_BYTES (RV_ERR_PAYLOAD_TOO_LARGE), and reaches the
 * receiver's host inbox as an RV_KIND_K2K message whose source is the sender's routed address. Whether the
 * target runs is known only to the host: a message it cannot deliver becomes a dead letter there. Returns
 * RV_HOST_ENDPOINT (refused by rv_send) for a device or slot out of range. */
RV_FN uint32_t rv_address(uint32_t device, uint32_t slot) {
    if (device >= RV_MAX_ROUTED_DEVICES || slot > RV_ROUTED_SLOT_MASK) return RV_HOST_ENDPOINT;
    return RV_ROUTED_BIT | (device << RV_ROUTED_DEVICE_SHIFT) | slot;
}
/* Like rv_send, but hands the duty to answer the current message to the receiver: its rv_reply answers the
 * host's original message (same correlation), on another device too (the host moves the waiting call). The
 * forwarding actor may then not reply itself. */
RV_API int rv_forward(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len);
/* Stop making progress (and stop the heartbeat) for ns nanoseconds, or until the slot is killed. */
RV_API void rv_stall_for(rv_actor_ctx *ctx, uint64_t ns);

/* Little helpers for payload decoding. */
RV_FN uint32_t rv_read_u32(const uint8_t *p) {
    uint32_t v;
    rv_copy_bytes(&v, p, 4);
    return v;
}
RV_FN uint64_t rv_read_u64(const uint8_t *p) {
    uint64_t v;
    rv_copy_bytes(&v, p, 8);
    return v;
}

#endif /* RV_BEHAVIOUR_H */
