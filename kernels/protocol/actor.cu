/*
 * protocol/actor.cu - the actor step: what an actor block does for each of its slots (requests from block 0, inits,
 * inbox and kernel-to-kernel messages, failures, idle beats).
 *
 * Part of the device protocol (rv_protocol.cu includes the parts in order; read its header for the ownership
 * rules). Mirrored function by function by wgsl/protocol/actor.wgsl (device/tests/protocol_mirror.rs).
 */
#ifndef RV_PROTOCOL_ACTOR_CU
#define RV_PROTOCOL_ACTOR_CU
/* ------------------------------------------------------------------------------------------------
 * Actor step.
 * ---------------------------------------------------------------------------------------------- */

/* Carries out block 0's request (Kill / Drain / Resume) at a message boundary, in any state. */
RV_FN void rv_actor_handle_request(const rv_grid_view *g, uint32_t slot, rv_control_block *cb, uint32_t seq) {
    uint32_t request = rv_load_relaxed_u32(&cb->request);
    uint32_t state = rv_load_relaxed_u32(&cb->state);
    if (request == RV_OP_KILL) {
        g->actors[slot].stall_until_ns = 0;
        rv_store_relaxed_u64(&cb->stall_until_ns, 0);
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
    } else if (request == RV_OP_DRAIN && state == RV_STATE_ACTIVE) {
        rv_store_release_u32(&cb->state, RV_STATE_DRAINING);
    } else if (request == RV_OP_RESUME && state == RV_STATE_DRAINING) {
        rv_store_release_u32(&cb->state, RV_STATE_ACTIVE);
    }
    rv_store_release_u32(&cb->request_ack, seq);
    rv_raise_attention(g, slot);
}

RV_FN void rv_actor_fail(const rv_grid_view *g, uint32_t slot, rv_control_block *cb, int32_t code, uint32_t index) {
    cb->last_error = code;
    cb->failed_index = index;
    rv_store_release_u32(&cb->state, RV_STATE_FAILED);
    rv_raise_attention(g, slot);
}

/* Room for one more outbox cell. The host's consumer index is read (across PCIe on a GPU) only when the value
 * last read leaves no room: it only grows, so the room it left is there still. */
RV_FN int rv_outbox_has_room(const rv_grid_view *g, rv_control_block *cb, rv_actor_record *ar) {
    if (ar->outbox_tail - ar->outbox_head_seen < g->outbox_capacity) return 1;
    ar->outbox_head_seen = rv_load_acquire_u32(&cb->outbox_head);
    return ar->outbox_tail - ar->outbox_head_seen < g->outbox_capacity;
}

/* An incarnation starts (its init succeeded): the actor's copies of its control block's own fields, which block 0
 * wrote while the slot was stopped (rv_actor_record). */
RV_FN void rv_actor_cache_load(const rv_grid_view *g, uint32_t slot, rv_control_block *cb) {
    rv_actor_record *ar = &g->actors[slot];
    ar->inbox_head = rv_load_acquire_u32(&cb->inbox_head);
    ar->outbox_tail = rv_load_relaxed_u32(&cb->outbox_tail);
    ar->outbox_head_seen = rv_load_acquire_u32(&cb->outbox_head);
    ar->behaviour = cb->behaviour;
    ar->generation = cb->generation;
    ar->messages_processed = rv_load_relaxed_u64(&cb->messages_processed);
    ar->hlc = cb->hlc;
    ar->stall_until_ns = rv_load_relaxed_u64(&cb->stall_until_ns);
}

/* The actor's clock after a step: its copy and the control block's. */
RV_FN void rv_keep_hlc(rv_control_block *cb, rv_actor_record *ar, uint64_t hlc) {
    ar->hlc = hlc;
    cb->hlc = hlc;
}

/* A host message is well formed: a user message for this slot, its payload inline or in the slot's inbox bulk
 * area (a reference that names bytes outside that area is refused). */
RV_FN int rv_envelope_valid(const rv_grid_view *g, const rv_envelope *e, uint32_t slot) {
    if (e->kind != RV_KIND_USER && e->kind != RV_KIND_STATE && e->kind != RV_KIND_K2K) return 0;
    if (e->payload_len > RV_PAYLOAD_BYTES || e->destination != slot) return 0;
    /* a routed kernel-to-kernel message (the host delivers it here): inline only */
    if (e->kind == RV_KIND_K2K) return !(e->flags & RV_FLAG_BULK);
    return !(e->flags & RV_FLAG_BULK) || rv_bulk_at(g, g->inbox_bulk, slot, e) != 0;
}

/* The bytes a state read asks for: the state region's first N bytes when its inline payload is a u32 N (the
 * behaviour's declared state size), capped at the region; the whole region when the payload is empty. */
RV_FN uint32_t rv_state_read_len(const rv_grid_view *g, const rv_envelope *msg) {
    if (msg->payload_len < 4 || (msg->flags & RV_FLAG_BULK)) return g->state_bytes;
    uint32_t wanted = rv_read_u32(msg->payload);
    return wanted < g->state_bytes ? wanted : g->state_bytes;
}

/* The next message of a step: its context, and the actor's clock merged with the message's. */
RV_FN void rv_ctx_next(rv_actor_ctx *ctx, const rv_envelope *msg, uint64_t now) {
    ctx->msg = msg;
    ctx->hlc = rv_hlc_next(ctx->hlc, msg->hlc, now);
}

/* Runs the current message through the behaviour, or fails it with `injected` (when not RV_OK), and returns
 * the result. On RV_OK the message is counted as processed and nothing is published yet: the caller consumes
 * the message, then publishes what it staged (rv_finish_message(ctx, 1)), so a host that has read the reply
 * sees the message counted and consumed (both are ordered before the outbox tail's release). Otherwise what
 * the behaviour staged is voided here. */
RV_FN int rv_actor_run(const rv_grid_view *g, rv_control_block *cb, rv_actor_ctx *ctx, int injected) {
    rv_actor_record *ar = &g->actors[ctx->slot];
    int rc = injected != RV_OK ? injected : rv_dispatch(g, ar->behaviour, ctx, ctx->msg);
    if (rc == RV_OK) {
        ar->messages_processed += 1;
        rv_store_relaxed_u64(&cb->messages_processed, ar->messages_processed);
    } else {
        rv_finish_message(ctx, 0);
    }
    return rc;
}

/* A traced message (RV_FLAG_TRACE) was answered: when its step began, read it and ran it, and now (the reply is
 * published), in the grid header for the host's breakdown of the call; the last stamp released after the rest. */
RV_FN void rv_record_trace(const rv_grid_view *g, uint32_t slot, uint64_t began_ns, uint64_t read_ns,
                           uint64_t ran_ns) {
    rv_grid_header *h = g->header;
    rv_store_relaxed_u32(&h->trace_slot, slot);
    rv_store_relaxed_u64(&h->trace_ns[0], began_ns);
    rv_store_relaxed_u64(&h->trace_ns[1], read_ns);
    rv_store_relaxed_u64(&h->trace_ns[2], ran_ns);
    rv_store_release_u64(&h->trace_ns[3], rv_grid_now_ns(g));
}

/* The behaviour asked to stall (rv_stall_for) while this step ran it: the step ends at once. */
RV_FN int rv_stall_requested(const rv_actor_ctx *ctx) { return ctx->stall_requested; }

/* Gives a consumed kernel-to-kernel cell back to its producers, and its bulk bytes if it had any (voided sends
 * included: their bytes were reserved too). */
RV_FN void rv_k2k_release(const rv_grid_view *g, rv_k2k_meta *meta, rv_k2k_cell *cell, uint32_t khead) {
    if (cell->env.flags & RV_FLAG_BULK) rv_store_release_dev_u32(&meta->bulk_head, rv_bulk_ref_of(&cell->env).end);
    rv_store_release_dev_u32(&cell->seq, khead + g->k2k_capacity);
    meta->head = khead + 1;
}

/* True if a kernel-to-kernel message waits in `slot`'s ring (local region only). */
RV_FN int rv_k2k_waiting(const rv_grid_view *g, uint32_t slot) {
    uint32_t khead = g->k2k_meta[slot].head;
    return rv_load_acquire_dev_u32(&rv_k2k_cell_at(g, slot, khead)->seq) == khead + 1;
}

/* Advances the slot's heartbeat (the control block holds a copy of the actor record's count). */
RV_FN void rv_beat(rv_control_block *cb, rv_actor_record *ar) {
    ar->beats += 1;
    rv_store_relaxed_u64(&cb->heartbeat, ar->beats);
}

/* The idle step: if nothing the slot depends on moved since its last full step (host_seq: one shared-region
 * load; device_seq and the kernel-to-kernel ring: local), it returns at once; an Active slot beats at most once
 * per RV_IDLE_BEAT_NS. Returns 1 if the step is done. */
RV_FN int rv_actor_idle(const rv_grid_view *g, rv_control_block *cb, rv_actor_record *ar, uint32_t slot,
                        uint32_t host_seq, uint32_t device_seq) {
    if (ar->quiet == RV_QUIET_NO || host_seq != ar->seen_host_seq || device_seq != ar->seen_device_seq) return 0;
    if (ar->quiet == RV_QUIET_ACTIVE) {
        /* the ring is the actor's while it runs (block 0's while the slot is stopped: not read then) */
        if (rv_k2k_waiting(g, slot)) return 0;
        uint64_t now = rv_grid_coarse_ns(g);
        if (now >= ar->next_beat_ns) {
            /* an injected device stall stops every heartbeat (read here, at the idle beat rate only) */
            if (rv_load_acquire_u32(&g->header->device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) return 1;
            ar->next_beat_ns = now + RV_IDLE_BEAT_NS;
            rv_beat(cb, ar);
        }
    }
    return 1;
}

/* On the actor's block: runs the behaviour's init for a creation block 0 prepared (state Initializing, pending_op
 * RV_OP_INIT), then makes the slot Active, or Failed with the init's code, and raises attention (block 0
 * publishes the event). */
RV_FN uint32_t rv_actor_init(const rv_grid_view *g, uint32_t slot, rv_control_block *cb) {
    rv_keeper_record *rec = &g->keepers[slot];
    if (rv_load_acquire_dev_u32(&rec->pending_op) != RV_OP_INIT) return 0; /* block 0 is not done preparing */
    const rv_command *cmd = &rec->pending;
    rv_envelope init;
    rv_zero16(&init, sizeof(init) / 16);
    init.kind = RV_KIND_INIT;
    init.flags = RV_FLAG_NO_REPLY;
    init.payload_len = (uint16_t)cmd->init_len;
    init.source = RV_HOST_ENDPOINT;
    init.destination = slot;
    init.generation = cb->generation;
    init.correlation = cmd->cmd_id;
    init.hlc = cb->hlc;
    rv_copy_bytes(init.payload, cmd->init, cmd->init_len);
    rv_actor_ctx ctx;
    rv_ctx_init(&ctx, g, slot, 1, &init);
    int rc = rv_dispatch(g, cmd->behaviour, &ctx, &init);
    if (rc == RV_STALL) rc = RV_ERR_NOT_ALLOWED;
    /* The init's outcome, apart from the state: once Active, this block may run the incarnation on its queued
     * messages, and fail, before block 0 reports the creation (ordered before block 0's acquire of the state). */
    rec->init_result = rc;
    if (rc == RV_OK) {
        rv_actor_cache_load(g, slot, cb);
        rv_store_release_u32(&cb->state, RV_STATE_ACTIVE);
    } else {
        cb->last_error = rc;
        rv_store_release_u32(&cb->state, RV_STATE_FAILED);
    }
    rv_raise_attention(g, slot);
    return RV_STEP_PROGRESS | RV_STEP_ATTENTION;
}

/* What an actor's step reads after the inbox tail: the device's fault word, the slot's fault bits and its state,
 * with relaxed loads, and the message at `head` when `tail` is past it (into `first`; returns whether it did).
 * On a GPU all their loads are issued together, one PCIe round trip where the words and then the envelope cost
 * two. The tail's acquire orders them after it, so a message seen is seen with every fault injected before it
 * was sent; nothing read later relies on an acquire of theirs (an init synchronises on block 0's pending_op,
 * the running states are the actor's own writes, a one-shot fault's sequence number is read with acquire). The
 * cell at `head` is the host's until the actor consumes it: it holds the message the tail published. */
RV_FN int rv_read_step_words(const rv_grid_view *g, uint32_t slot, rv_control_block *cb, uint32_t head,
                             uint32_t tail, uint32_t words[3], rv_envelope *first) {
    uint32_t units = tail != head ? (uint32_t)(sizeof(rv_envelope) / 16) : 0u;
    rv_load3_and_copy16_from_host(words, &g->header->device_faults, &cb->fault_flags, &cb->state, first,
                                  rv_inbox_cell(g, slot, head), units);
    return units != 0;
}

RV_STEP_API uint32_t rv_actor_step(const rv_grid_view *g, uint32_t slot, uint32_t budget) {
    if (slot >= g->slot_count) return 0;
    rv_control_block *cb = &g->blocks[slot];
    rv_actor_record *ar = &g->actors[slot];
    const uint32_t *device_faults = &g->header->device_faults;
    const uint32_t stops = RV_DEVICE_STALL | RV_DEVICE_HALT; /* an injected device stall or halt: do nothing */
    /* The defects the simulator must find (reading a fault word before the tail) read it first. */
    uint32_t faults = 0;
    if (RV_DEFECT(RV_DEFECT_FAULTS_BEFORE_TAIL)) faults = rv_load_acquire_u32(&cb->fault_flags);
    if (RV_DEFECT(RV_DEFECT_DEVICE_FAULTS_BEFORE_TAIL) && (rv_load_acquire_u32(device_faults) & stops)) return 0;
    /* host_seq and the inbox tail, adjacent, in one 64-bit acquire load: one PCIe round trip on a GPU where the
     * two acquires cost two. The host publishes the tail before it bumps host_seq, so a message whose bump this
     * step sees is below this tail. Both sequence numbers first: whatever is published after they are read makes
     * the next step a full one. */
    uint64_t tail_and_seq = rv_load_acquire_u64((const uint64_t *)&cb->inbox_tail);
    uint32_t tail = (uint32_t)tail_and_seq;
    uint32_t host_seq = (uint32_t)(tail_and_seq >> 32);
    uint32_t device_seq = rv_load_acquire_dev_u32(&g->keepers[slot].device_seq);
    if (rv_actor_idle(g, cb, ar, slot, host_seq, device_seq)) return 0;
    /* A traced message's first stamp, the step's start: taken where a clock read is cheap (a GPU's timer), and on
     * the host build only while the host has a traced call in flight (a precise clock read there is a twentieth of
     * a latency-mode call; the flag shares the header line with the device faults, read below). */
    uint64_t began_ns = 0;
    if (RV_CHEAP_CLOCK || rv_peek_u32(&g->header->trace_armed)) began_ns = rv_grid_now_ns(g);
    ar->quiet = RV_QUIET_NO;
    ar->seen_host_seq = host_seq;
    ar->seen_device_seq = device_seq;
    /* The fault words after the tail (the device's too: the simulator found a message sent into a device stall
     * processed when it was read first), with the state and the first message. */
    rv_envelope copy; /* the host's cell being handled, read once with 16-byte loads; the behaviour reads the copy */
    uint32_t words[3];
    const uint32_t first_head = ar->inbox_head;
    int first_read = rv_read_step_words(g, slot, cb, first_head, tail, words, &copy);
    uint32_t dev_faults = RV_DEFECT(RV_DEFECT_DEVICE_FAULTS_BEFORE_TAIL) ? 0u : words[0];
    if (!RV_DEFECT(RV_DEFECT_FAULTS_BEFORE_TAIL)) faults = words[1];
    uint32_t state = words[2];
    if (dev_faults & stops) return 0;
    /* A wedged actor is stuck inside its behaviour: it acknowledges nothing, not even a kill. */
    if (faults & RV_FAULT_WEDGE) return 0;
    uint32_t out = 0;
    /* Block 0 bumps device_seq after every request it posts: the request words (shared, across PCIe on a GPU)
     * are read only when device_seq moved since the last step that read them. */
    if (device_seq != ar->checked_device_seq) {
        uint32_t seq = rv_load_acquire_u32(&cb->request_seq);
        if (seq != rv_load_relaxed_u32(&cb->request_ack)) {
            rv_actor_handle_request(g, slot, cb, seq);
            state = rv_load_relaxed_u32(&cb->state); /* the request may have changed it (the actor's own store) */
            out |= RV_STEP_PROGRESS | RV_STEP_ATTENTION;
        }
        ar->checked_device_seq = device_seq;
    }
    if (state == RV_STATE_INITIALIZING) return out | rv_actor_init(g, slot, cb);
    if (state != RV_STATE_ACTIVE && state != RV_STATE_DRAINING) {
        if (out == 0) ar->quiet = RV_QUIET_STOPPED;
        return out;
    }
    if (faults & RV_FAULT_STALL) return out;
    uint64_t stall_until = ar->stall_until_ns;
    if (stall_until != 0) {
        if (rv_grid_now_ns(g) < stall_until) return out;
        ar->stall_until_ns = 0;
        rv_store_relaxed_u64(&cb->stall_until_ns, 0);
    }

    rv_actor_ctx ctx;
    rv_ctx_init(&ctx, g, slot, 0, 0);

    uint32_t done = 0;
    uint32_t head = ar->inbox_head;
    uint32_t limit = tail;
    if (state == RV_STATE_DRAINING) limit = rv_load_relaxed_u32(&cb->drain_until);
    if ((uint32_t)(tail - head) > g->inbox_capacity || (uint32_t)(limit - head) > g->inbox_capacity) {
        /* The host published an impossible index: refuse to read anything and report. */
        rv_actor_fail(g, slot, cb, RV_ERR_BAD_ENVELOPE, RV_NO_INDEX);
        return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    int stalled = 0;
    uint64_t now = began_ns != 0 ? began_ns : rv_grid_coarse_ns(g); /* the messages' HLC: milliseconds will do */

    /* Kernel-to-kernel inbox first: what other actors sent before the host's next message is seen first. */
    rv_k2k_meta *meta = &g->k2k_meta[slot];
    int k2k_pending = 0;
    while (!stalled) {
        uint32_t khead = meta->head;
        rv_k2k_cell *cell = rv_k2k_cell_at(g, slot, khead);
        if (rv_load_acquire_dev_u32(&cell->seq) != khead + 1) break;
        if (done >= budget || !rv_outbox_has_room(g, cb, ar)) {
            k2k_pending = 1;
            break;
        }
        if (cell->env.kind == RV_KIND_K2K) {
            rv_ctx_next(&ctx, &cell->env, now);
            int rc = rv_actor_run(g, cb, &ctx, RV_OK);
            if (rc == RV_STALL) {
                stalled = 1;
                break;
            }
            if (rc != RV_OK) {
                /* The message is consumed: answered with the failure code if someone waits for an answer
                 * (room was checked above), counted as dropped otherwise. */
                if (cell->env.flags & RV_FLAG_NO_REPLY) {
                    cb->k2k_dropped += 1;
                } else {
                    rv_reply_error(&ctx, rc, slot);
                    out |= rv_finish_message(&ctx, 1);
                }
                rv_k2k_release(g, meta, cell, khead);
                rv_keep_hlc(cb, ar, ctx.hlc);
                rv_actor_fail(g, slot, cb, rc, RV_NO_INDEX);
                return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
            }
            cb->k2k_received += 1;
            rv_k2k_release(g, meta, cell, khead);
            out |= rv_finish_message(&ctx, 1);
        } else {
            rv_k2k_release(g, meta, cell, khead); /* a voided send: skipped */
        }
        done += 1;
        if (rv_stall_requested(&ctx)) {
            stalled = 1;
            break;
        }
    }

    /* Host inbox. The first message was read with the step's words, unless a request moved the head since. */
    int copied = first_read && head == first_head;
    while (!stalled && done < budget && head != limit) {
        if (!rv_outbox_has_room(g, cb, ar)) break;
        if (!copied) rv_copy16_from_host(&copy, rv_inbox_cell(g, slot, head), sizeof(rv_envelope) / 16);
        copied = 0;
        const rv_envelope *msg = &copy;
        uint64_t read_ns = 0;
        if (msg->flags & RV_FLAG_TRACE) {
            read_ns = rv_grid_now_ns(g);
            if (began_ns == 0) began_ns = read_ns; /* the step began before the host armed the trace */
        }
        rv_ctx_next(&ctx, msg, now);
        /* One injected fault per fault_seq. Injected corruption: this message is handled as if its header were
         * corrupt (the inbox cell is the host's and is not written). */
        uint32_t fault_seq = 0; /* read only when a one-shot fault is armed (a shared word: PCIe on a GPU) */
        if (faults & (RV_FAULT_CORRUPT_NEXT | RV_FAULT_CRASH_NEXT)) {
            fault_seq = rv_load_acquire_u32(&cb->fault_seq);
            /* A one-shot fault is due: which one, from the bits the host stored before this sequence number (it
             * stores the bits first), not from the step's copy, which may be of the fault before (found by the
             * simulator: a corruption injected after a crash was consumed became a second crash). */
            if (fault_seq != cb->fault_ack && !RV_DEFECT(RV_DEFECT_ONE_SHOT_KIND_FROM_STEP))
                faults = rv_load_acquire_u32(&cb->fault_flags);
        }
        int corrupt = (faults & RV_FAULT_CORRUPT_NEXT) && fault_seq != cb->fault_ack;
        if (corrupt) cb->fault_ack = fault_seq;
        if (corrupt || !rv_envelope_valid(g, msg, slot)) {
            cb->bad_envelopes += 1;
            rv_reply_error(&ctx, RV_ERR_BAD_ENVELOPE, msg->kind);
            head += 1;
            if (RV_DEFECT(RV_DEFECT_ERROR_REPLY_BEFORE_CONSUMED)) out |= rv_finish_message(&ctx, 1);
            /* consumed before (or with) the answer, as every message (found by the simulator) */
            out |= rv_consume_and_finish(&ctx, head);
            done += 1;
            continue;
        }
        if (msg->kind == RV_KIND_STATE) {
            /* A copy of the state between two messages, answered in order; not counted as processed. A state
             * larger than a reply may carry is answered with RV_ERR_PAYLOAD_TOO_LARGE. */
            uint32_t len = rv_state_read_len(g, msg);
            int rc = rv_stage_reply(&ctx, RV_KIND_REPLY, rv_state_region(g, slot), len);
            if (rc == RV_ERR_OUTBOX_FULL) break; /* offered again once the host has read earlier replies */
            if (rc != RV_OK) rv_reply_error(&ctx, rc, len);
            head += 1;
            out |= rv_consume_and_finish(&ctx, head);
            done += 1;
            continue;
        }
        int injected = RV_OK;
        if ((faults & RV_FAULT_CRASH_NEXT) && fault_seq != cb->fault_ack) {
            cb->fault_ack = fault_seq;
            injected = RV_ERR_INJECTED;
        }
        int rc = rv_actor_run(g, cb, &ctx, injected);
        if (rc == RV_STALL) {
            stalled = 1;
            break;
        }
        if (rc != RV_OK) {
            rv_keep_hlc(cb, ar, ctx.hlc);
            rv_actor_fail(g, slot, cb, rc, head);
            return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
        }
        uint64_t ran_ns = (msg->flags & RV_FLAG_TRACE) ? rv_grid_now_ns(g) : 0;
        if (msg->kind == RV_KIND_K2K) cb->k2k_received += 1;
        head += 1;
        if (RV_DEFECT(RV_DEFECT_REPLY_BEFORE_CONSUMED)) out |= rv_finish_message(&ctx, 1);
        out |= rv_consume_and_finish(&ctx, head);
        if (msg->flags & RV_FLAG_TRACE) rv_record_trace(g, slot, began_ns, read_ns, ran_ns);
        done += 1;
        /* A stall requested by this message takes effect at once. */
        if (rv_stall_requested(&ctx)) {
            stalled = 1;
            break;
        }
    }

    rv_keep_hlc(cb, ar, ctx.hlc);
    if (done > 0) out |= RV_STEP_PROGRESS;
    if (!stalled || done > 0) rv_beat(cb, ar);
    if (state == RV_STATE_DRAINING && head == limit && !k2k_pending && !stalled) {
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
        rv_raise_attention(g, slot);
        out |= RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    /* Nothing done, nothing waiting, no stall: idle steps until host_seq, device_seq or the ring moves. */
    if (out == 0 && !stalled && !k2k_pending && head == limit && state == RV_STATE_ACTIVE) {
        ar->quiet = RV_QUIET_ACTIVE;
        ar->next_beat_ns = rv_grid_coarse_ns(g) + RV_IDLE_BEAT_NS;
    }
    return out;
}

#endif /* RV_PROTOCOL_ACTOR_CU */
