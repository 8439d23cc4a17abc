/*
 * protocol/api.cu - the behaviour API: what a behaviour calls (state, payload, reply, send, forward, stall), and how a
 * message's staged effects are published or voided (rv_finish_message).
 *
 * Part of the device protocol (rv_protocol.cu includes the parts in order; read its header for the ownership
 * rules). Mirrored function by function by wgsl/protocol/api.wgsl (device/tests/protocol_mirror.rs).
 */
#ifndef RV_PROTOCOL_API_CU
#define RV_PROTOCOL_API_CU
/* ------------------------------------------------------------------------------------------------
 * Behaviour API.
 * ---------------------------------------------------------------------------------------------- */
/* A fresh per-message context for `slot` (nothing staged). */
RV_FN void rv_ctx_init(rv_actor_ctx *ctx, const rv_grid_view *g, uint32_t slot, uint32_t init_phase,
                       const rv_envelope *msg) {
    ctx->g = g;
    ctx->cb = &g->blocks[slot];
    ctx->slot = slot;
    /* A running incarnation's generation and clock from the actor's copies (local); an init's from the control
     * block, which block 0 has just written. */
    const rv_actor_record *ar = &g->actors[slot];
    ctx->generation = init_phase ? ctx->cb->generation : ar->generation;
    ctx->init_phase = init_phase;
    ctx->msg = msg;
    ctx->hlc = init_phase ? ctx->cb->hlc : ar->hlc;
    ctx->reply_staged = 0;
    ctx->reply_bulk = 0;
    ctx->reply_forwarded = 0;
    ctx->send_count = 0;
    ctx->routed_count = 0;
    ctx->stall_requested = 0;
}

RV_API uint32_t rv_max_payload(rv_actor_ctx *ctx) {
    return ctx->g->bulk_bytes > RV_PAYLOAD_BYTES ? ctx->g->bulk_bytes : RV_PAYLOAD_BYTES;
}

/* A host message's bytes lie in the slot's inbox bulk area, a kernel-to-kernel message's in its k2k one. The
 * step validated the reference before the behaviour runs; a bad one reads as an empty payload. */
RV_API const uint8_t *rv_payload(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!(msg->flags & RV_FLAG_BULK)) return msg->payload;
    uint8_t *areas = msg->kind == RV_KIND_K2K ? ctx->g->k2k_bulk : ctx->g->inbox_bulk;
    const uint8_t *p = rv_bulk_at(ctx->g, areas, ctx->slot, msg);
    return p != 0 ? p : msg->payload;
}

RV_API uint32_t rv_payload_len(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!(msg->flags & RV_FLAG_BULK)) return msg->payload_len <= RV_PAYLOAD_BYTES ? msg->payload_len : 0;
    uint8_t *areas = msg->kind == RV_KIND_K2K ? ctx->g->k2k_bulk : ctx->g->inbox_bulk;
    if (rv_bulk_at(ctx->g, areas, ctx->slot, msg) == 0) return 0;
    return rv_bulk_ref_of(msg).len;
}

RV_FN int rv_stage_reply(rv_actor_ctx *ctx, uint8_t kind, const void *payload, uint32_t len) {
    if (ctx->init_phase) return RV_ERR_NOT_ALLOWED;
    if (ctx->reply_staged || ctx->reply_forwarded) return RV_ERR_LIMIT;
    if (len > rv_max_payload(ctx)) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->msg->flags & RV_FLAG_NO_REPLY) return RV_OK;
    const rv_grid_view *g = ctx->g;
    uint32_t bulk_end = 0;
    if (len > RV_PAYLOAD_BYTES) {
        /* The bytes go straight into the outbox's bulk area, past its producer counter: published (the counter
         * moved) only on commit, overwritten by the next reply otherwise. */
        rv_actor_record *ar = &g->actors[ctx->slot];
        uint32_t head = rv_load_acquire_u32(&ctx->cb->outbox_bulk_head);
        bulk_end = rv_bulk_reserve(g->bulk_bytes, ar->outbox_bulk_tail, head, len);
        if (bulk_end == ar->outbox_bulk_tail) return RV_ERR_OUTBOX_FULL; /* len > 0: a reservation moves it */
        uint32_t start = (bulk_end - len) & (g->bulk_bytes - 1);
        rv_copy_to_bulk(g->outbox_bulk + (uint64_t)ctx->slot * g->bulk_bytes + start, payload, len);
    }
    /* Staged locally; space for one outbox cell was checked before the message was dispatched. */
    rv_envelope *e = &ctx->reply;
    e->kind = kind;
    e->flags = 0;
    e->payload_len = (uint16_t)len;
    e->source = ctx->slot;
    e->destination = RV_HOST_ENDPOINT;
    e->generation = ctx->generation;
    e->correlation = ctx->msg->correlation;
    e->hlc = ctx->hlc;
    if (len > RV_PAYLOAD_BYTES) {
        rv_bulk_ref_set(e, bulk_end, len);
        ctx->reply_bulk = 1;
        ctx->reply_bulk_end = bulk_end;
    } else {
        rv_copy_bytes(e->payload, payload, len);
    }
    ctx->reply_staged = 1;
    return RV_OK;
}

RV_API uint32_t rv_self(rv_actor_ctx *ctx) { return ctx->slot; }
RV_API uint32_t rv_generation(rv_actor_ctx *ctx) { return ctx->generation; }
RV_API uint64_t rv_clock_ns(rv_actor_ctx *ctx) { return rv_grid_now_ns(ctx->g); }
RV_API uint64_t rv_monotonic_ns(rv_actor_ctx *ctx) {
    (void)ctx;
    return rv_now_monotonic_ns();
}
RV_API uint32_t rv_state_bytes(rv_actor_ctx *ctx) { return ctx->g->state_bytes; }
RV_API void *rv_state(rv_actor_ctx *ctx) { return rv_state_region(ctx->g, ctx->slot); }

RV_API int rv_reply(rv_actor_ctx *ctx, const void *payload, uint32_t len) {
    return rv_stage_reply(ctx, RV_KIND_REPLY, payload, len);
}

RV_API int rv_reply_error(rv_actor_ctx *ctx, int32_t code, uint32_t detail) {
    rv_error_payload p;
    p.code = code;
    p.detail = detail;
    return rv_stage_reply(ctx, RV_KIND_ERROR, &p, sizeof(p));
}

/* A send to a routed address (rv_address): the envelope is written to this slot's outbox past its tail, and the
 * host routes it once the message commits (rv_finish_message moves the tail over it; a voided message leaves the
 * cell to be overwritten). One outbox cell stays free for the message's reply (room for which was checked before
 * the message was dispatched). Inline payloads only. */
RV_FN int rv_stage_routed(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len, uint8_t flags) {
    const rv_grid_view *g = ctx->g;
    if ((destination >> RV_ROUTED_DEVICE_SHIFT) - (RV_ROUTED_BIT >> RV_ROUTED_DEVICE_SHIFT) >= RV_MAX_ROUTED_DEVICES)
        return RV_ERR_SLOT_RANGE;
    if (len > RV_PAYLOAD_BYTES) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->send_count + ctx->routed_count >= RV_MAX_SENDS_PER_MESSAGE) return RV_ERR_LIMIT;
    if (g->outbox_capacity < 2u) return RV_ERR_LIMIT; /* no cell to spare, ever */
    uint32_t tail = g->actors[ctx->slot].outbox_tail + ctx->routed_count;
    uint32_t used = tail - rv_load_acquire_u32(&ctx->cb->outbox_head);
    if (used + 2u > g->outbox_capacity) return RV_ERR_K2K_FULL;
    rv_envelope e;
    e.kind = RV_KIND_K2K;
    e.flags = flags;
    e.payload_len = (uint16_t)len;
    e.source = ctx->slot;
    e.destination = destination;
    e.generation = ctx->generation;
    e.correlation = ctx->msg->correlation;
    e.hlc = ctx->hlc;
    rv_copy_bytes(e.payload, payload, len);
    rv_copy_envelope(rv_outbox_cell(g, ctx->slot, tail), &e);
    ctx->routed_count += 1;
    return RV_OK;
}

RV_FN int rv_stage_send(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len, uint8_t flags) {
    const rv_grid_view *g = ctx->g;
    if (ctx->init_phase) return RV_ERR_NOT_ALLOWED;
    if (destination & RV_ROUTED_BIT) return rv_stage_routed(ctx, destination, payload, len, flags);
    if (destination >= g->slot_count) return RV_ERR_SLOT_RANGE;
    if (len > rv_max_payload(ctx)) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->send_count + ctx->routed_count >= RV_MAX_SENDS_PER_MESSAGE) return RV_ERR_LIMIT;
    uint32_t target_state = rv_load_acquire_u32(&g->blocks[destination].state);
    if (target_state != RV_STATE_ACTIVE && target_state != RV_STATE_DRAINING) return RV_ERR_TARGET_GONE;
    rv_k2k_meta *meta = &g->k2k_meta[destination];
    int bulk = len > RV_PAYLOAD_BYTES;
    uint32_t bulk_end = 0;
    if (bulk) {
        /* A large send reserves its bulk bytes and its cell under the ring's bulk lock, so bulk bytes are taken in
         * cell order and the consumer frees them in that order. A try-lock: a busy lock is "full for now". */
        if (rv_cas_u32(&meta->bulk_lock, 0, 1) != 0) return RV_ERR_K2K_FULL;
        uint32_t tail = rv_load_relaxed_dev_u32(&meta->bulk_tail);
        bulk_end = rv_bulk_reserve(g->bulk_bytes, tail, rv_load_acquire_dev_u32(&meta->bulk_head), len);
        if (bulk_end == tail) {
            rv_store_release_dev_u32(&meta->bulk_lock, 0);
            return RV_ERR_K2K_FULL;
        }
    }
    /* Reserve a cell in the destination's bounded MPSC queue (device-scope CAS, LOCAL memory). */
    uint32_t pos = rv_load_relaxed_dev_u32(&meta->tail);
    rv_k2k_cell *cell;
    for (;;) {
        cell = rv_k2k_cell_at(g, destination, pos);
        uint32_t seq = rv_load_acquire_dev_u32(&cell->seq);
        int32_t dif = (int32_t)(seq - pos);
        if (dif == 0) {
            uint32_t seen = rv_cas_u32(&meta->tail, pos, pos + 1);
            if (seen == pos) break;
            pos = seen;
        } else if (dif < 0) {
            if (bulk) rv_store_release_dev_u32(&meta->bulk_lock, 0);
            return RV_ERR_K2K_FULL;
        } else {
            pos = rv_load_relaxed_dev_u32(&meta->tail);
        }
    }
    if (bulk) {
        rv_store_release_dev_u32(&meta->bulk_tail, bulk_end);
        rv_store_release_dev_u32(&meta->bulk_lock, 0);
    }
    rv_envelope *e = &cell->env;
    e->kind = RV_KIND_K2K;
    e->flags = flags;
    e->payload_len = (uint16_t)len;
    e->source = ctx->slot;
    e->destination = destination;
    e->generation = ctx->generation;
    e->correlation = ctx->msg->correlation;
    e->hlc = ctx->hlc;
    if (bulk) {
        /* The cell and these bytes are this sender's until it publishes the cell (rv_finish_message). */
        uint32_t start = (bulk_end - len) & (g->bulk_bytes - 1);
        rv_copy_to_bulk(g->k2k_bulk + (uint64_t)destination * g->bulk_bytes + start, payload, len);
        rv_bulk_ref_set(e, bulk_end, len);
    } else {
        rv_copy_bytes(e->payload, payload, len);
    }
    ctx->send_cells[ctx->send_count] = cell;
    ctx->send_pos[ctx->send_count] = pos;
    ctx->send_count += 1;
    return RV_OK;
}

RV_API int rv_send(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len) {
    return rv_stage_send(ctx, destination, payload, len, (uint8_t)RV_FLAG_NO_REPLY);
}

RV_API int rv_forward(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len) {
    if (ctx->reply_staged || ctx->reply_forwarded) return RV_ERR_LIMIT;
    int rc = rv_stage_send(ctx, destination, payload, len, (uint8_t)(ctx->msg->flags & RV_FLAG_NO_REPLY));
    if (rc == RV_OK) ctx->reply_forwarded = 1;
    return rc;
}

RV_API void rv_stall_for(rv_actor_ctx *ctx, uint64_t ns) {
    if (ctx->init_phase) return;
    uint64_t until = rv_grid_now_ns(ctx->g) + ns;
    ctx->g->actors[ctx->slot].stall_until_ns = until;
    rv_store_relaxed_u64(&ctx->cb->stall_until_ns, until);
    ctx->stall_requested = 1;
}

/* Everything of rv_finish_message but the outbox tail's store: releases (ok) or voids (!ok) the kernel-to-kernel
 * sends, copies the staged reply into the outbox, moves the actor's copy of the outbox tail. Returns the outbox tail
 * to publish (the old one: nothing to publish). */
RV_FN uint32_t rv_stage_publication(rv_actor_ctx *ctx, int ok) {
    for (uint32_t i = 0; i < ctx->send_count; ++i) {
        rv_k2k_cell *cell = ctx->send_cells[i];
        if (!ok) cell->env.kind = RV_KIND_VOID;
        uint32_t destination = cell->env.destination; /* read before the cell is the consumer's */
        rv_store_release_dev_u32(&cell->seq, ctx->send_pos[i] + 1);
        rv_mark_work(ctx->g, destination);
    }
    if (ok && ctx->send_count + ctx->routed_count != 0) ctx->cb->k2k_sent += ctx->send_count + ctx->routed_count;
    /* the routed sends lie in the outbox from its tail on; the reply goes after them */
    rv_actor_record *ar = &ctx->g->actors[ctx->slot];
    uint32_t tail = ar->outbox_tail;
    uint32_t publish = ok ? tail + ctx->routed_count : tail;
    ctx->send_count = 0;
    ctx->routed_count = 0;
    ctx->reply_forwarded = 0;
    if (ctx->reply_staged) {
        if (ok) {
            rv_copy_envelope(rv_outbox_cell(ctx->g, ctx->slot, publish), &ctx->reply);
            if (ctx->reply_bulk) ctx->g->actors[ctx->slot].outbox_bulk_tail = ctx->reply_bulk_end;
            publish += 1;
        }
        ctx->reply_staged = 0;
        ctx->reply_bulk = 0;
    }
    ar->outbox_tail = publish;
    return publish;
}

/* Publishes (ok) or voids (!ok) what the behaviour staged for the current message. */
RV_FN uint32_t rv_finish_message(rv_actor_ctx *ctx, int ok) {
    uint32_t tail = ctx->g->actors[ctx->slot].outbox_tail;
    uint32_t publish = rv_stage_publication(ctx, ok);
    if (publish == tail) return 0;
    rv_store_release_u32(&ctx->cb->outbox_tail, publish);
    return RV_STEP_REPLIED;
}

/* The host's message just handled is consumed (the inbox head moves to `head`: the host reuses the cells below it)
 * and what it staged is published, never before its message is consumed (the simulator found an answer read while
 * its message still lay in the inbox, handed back as unprocessed when the actor then failed). The inbox
 * head and the outbox tail are adjacent (line 2 of the control block): when a reply or routed sends and no
 * kernel-to-kernel send are to be published, one 64-bit release store writes both, so a host that has read the
 * reply sees its message consumed, with one release where two cost two (on a GPU each waits for the thread's
 * earlier stores to reach the host across PCIe). Kernel-to-kernel sends keep the two stores: another actor must not
 * see them before the message is consumed. */
RV_FN uint32_t rv_consume_and_finish(rv_actor_ctx *ctx, uint32_t head) {
    rv_actor_record *ar = &ctx->g->actors[ctx->slot];
    ar->inbox_head = head;
    if (ctx->send_count != 0 || (!ctx->reply_staged && ctx->routed_count == 0)) {
        rv_store_release_u32(&ctx->cb->inbox_head, head);
        return rv_finish_message(ctx, 1);
    }
    uint32_t publish = rv_stage_publication(ctx, 1);
    rv_store_release_u64((uint64_t *)&ctx->cb->inbox_head, (uint64_t)publish << 32 | head);
    return RV_STEP_REPLIED;
}

#endif /* RV_PROTOCOL_API_CU */
