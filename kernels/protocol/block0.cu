/*
 * protocol/block0.cu - block 0: the device's lifecycle executor (commands from the host, creations, kills, restarts by
 * grant, the events it publishes, its heartbeat).
 *
 * Part of the device protocol (rv_protocol.cu includes the parts in order; read its header for the ownership
 * rules). Mirrored function by function by wgsl/protocol/block0.wgsl (device/tests/protocol_mirror.rs).
 */
#ifndef RV_PROTOCOL_BLOCK0_CU
#define RV_PROTOCOL_BLOCK0_CU
/* ------------------------------------------------------------------------------------------------
 * Block 0: the keeper (executes the host's lifecycle commands, publishes their events).
 * ---------------------------------------------------------------------------------------------- */
RV_FN uint32_t rv_event_room(const rv_grid_view *g) {
    rv_grid_header *h = g->header;
    uint32_t head = rv_load_acquire_u32(&h->event_head);
    uint32_t used = rv_load_relaxed_u32(&h->event_tail) - head;
    return used >= g->event_capacity ? 0 : g->event_capacity - used;
}

RV_FN void rv_publish_processed(const rv_grid_view *g, uint32_t kind, uint32_t slot, const rv_command *cmd,
                                int32_t code, uint32_t inbox_head, uint32_t failed_index, uint32_t k2k_dropped,
                                uint64_t messages_processed) {
    rv_grid_header *h = g->header;
    uint32_t tail = rv_load_relaxed_u32(&h->event_tail);
    int in_range = slot < g->slot_count;
    rv_control_block *cb = in_range ? &g->blocks[slot] : 0;
    /* Built locally, then copied into the ring with 16-byte stores. */
    rv_event local;
    rv_event *e = &local;
    e->kind = kind;
    e->slot = slot;
    e->generation = in_range ? cb->generation : 0;
    e->state = in_range ? rv_load_relaxed_u32(&cb->state) : 0;
    e->code = code;
    e->inbox_head = inbox_head;
    e->failed_index = failed_index;
    e->k2k_dropped = k2k_dropped;
    e->cmd_id = cmd ? cmd->cmd_id : 0;
    e->time_ns = rv_grid_now_ns(g);
    e->messages_processed = messages_processed;
    e->op = cmd ? cmd->op : RV_OP_NONE;
    int starts = kind == RV_EVT_CREATED || kind == RV_EVT_RESTARTED || kind == RV_EVT_CREATE_FAILED;
    e->inbox_start = cmd && starts ? cmd->inbox_index : 0;
    rv_copy16(&g->events[tail & (g->event_capacity - 1)], &local, sizeof(rv_event) / 16);
    rv_store_release_u32(&h->event_tail, tail + 1);
    rv_store_relaxed_u64(&h->events_published, rv_load_relaxed_u64(&h->events_published) + 1);
}

/* Publishes an event carrying the slot's current messages_processed. */
RV_FN void rv_publish(const rv_grid_view *g, uint32_t kind, uint32_t slot, const rv_command *cmd, int32_t code,
                      uint32_t inbox_head, uint32_t failed_index, uint32_t k2k_dropped) {
    uint64_t processed = slot < g->slot_count ? rv_load_relaxed_u64(&g->blocks[slot].messages_processed) : 0;
    rv_publish_processed(g, kind, slot, cmd, code, inbox_head, failed_index, k2k_dropped, processed);
}

RV_FN void rv_reject(const rv_grid_view *g, const rv_command *cmd, int32_t code) {
    rv_publish(g, RV_EVT_REJECTED, cmd->slot, cmd, code, RV_NO_INDEX, RV_NO_INDEX, 0);
}

/* Empties the kernel-to-kernel ring of a slot that is not running (block 0 acts as its consumer and as its
 * outbox producer). A message someone waits an answer for is answered with RV_ERR_TARGET_GONE while the
 * outbox has room; when it has none, the rest stays queued for the next incarnation (which answers it).
 * Notifications are dropped and counted. Returns how many messages were dropped. */
RV_FN uint32_t rv_reclaim_k2k(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    rv_k2k_meta *meta = &g->k2k_meta[slot];
    uint32_t dropped = 0;
    uint32_t tail = cb->outbox_tail;
    uint32_t room = g->outbox_capacity - (tail - rv_load_acquire_u32(&cb->outbox_head));
    for (;;) {
        uint32_t khead = meta->head;
        rv_k2k_cell *cell = rv_k2k_cell_at(g, slot, khead);
        if (rv_load_acquire_dev_u32(&cell->seq) != khead + 1) break;
        if (cell->env.kind == RV_KIND_K2K) {
            if (cell->env.flags & RV_FLAG_NO_REPLY) {
                dropped += 1;
            } else {
                if (room == 0) break;
                rv_envelope local;
                rv_zero16(&local, sizeof(local) / 16);
                rv_envelope *e = &local;
                rv_error_payload p;
                p.code = RV_ERR_TARGET_GONE;
                p.detail = slot;
                e->kind = RV_KIND_ERROR;
                e->flags = 0;
                e->payload_len = (uint16_t)sizeof(p);
                e->source = slot;
                e->destination = RV_HOST_ENDPOINT;
                e->generation = cb->generation;
                e->correlation = cell->env.correlation;
                e->hlc = cb->hlc;
                rv_copy_bytes(e->payload, &p, sizeof(p));
                rv_copy_envelope(rv_outbox_cell(g, slot, tail), &local);
                tail += 1;
                room -= 1;
            }
        }
        rv_k2k_release(g, meta, cell, khead);
    }
    if (tail != cb->outbox_tail) rv_store_release_u32(&cb->outbox_tail, tail);
    cb->k2k_dropped += dropped;
    return dropped;
}

/* (Re)creates a slot that is not running: new generation, zeroed state, the behaviour's init. */
RV_FN void rv_keeper_create(const rv_grid_view *g, const rv_command *cmd, uint32_t success_kind) {
    uint32_t slot = cmd->slot;
    rv_control_block *cb = &g->blocks[slot];
    rv_keeper_record *rec = &g->keepers[slot];
    uint32_t old_head = cb->inbox_head;
    uint32_t old_failed = cb->failed_index;
    uint64_t old_processed = cb->messages_processed; /* reported with Created/Restarted: the previous incarnation's */
    rv_store_relaxed_u32(&cb->state, RV_STATE_INITIALIZING);
    rv_zero16(rv_state_region(g, slot), g->state_bytes / 16); /* state_bytes is a multiple of 64 */
    uint32_t dropped = rv_reclaim_k2k(g, slot);
    cb->generation += 1;
    rv_store_relaxed_u64(&cb->heartbeat, 0);
    rv_store_relaxed_u64(&cb->messages_processed, 0);
    cb->last_error = 0;
    cb->behaviour = cmd->behaviour;
    cb->failed_index = RV_NO_INDEX;
    cb->k2k_sent = 0;
    cb->k2k_received = 0;
    cb->bad_envelopes = 0;
    cb->stall_until_ns = 0;
    cb->fault_ack = rv_load_acquire_u32(&cb->fault_seq);
    cb->hlc = rv_hlc_next(cb->hlc, 0, rv_grid_now_ns(g));
    /* The new incarnation starts at the host's cutoff, or after what the old one already consumed (it may
     * have consumed messages sent after the host submitted the restart, before it saw the kill; those must
     * not be processed twice). A message it failed on was handed back to the host: skip it too. */
    uint32_t consumed_end = old_head;
    if (old_failed != RV_NO_INDEX && old_failed == old_head) consumed_end = old_head + 1;
    uint32_t start = cmd->inbox_index;
    if ((int32_t)(consumed_end - start) > 0) start = consumed_end;
    rv_store_release_u32(&cb->inbox_head, start);

    /* The behaviour's init runs on the actor's own block (rv_actor_init): a slow or stuck init never holds
     * block 0. The command and what its event will say wait in block 0's record; pending_op is published last.
     * The command is also kept as the incarnation's start (a granted restart repeats it); its inbox index
     * becomes the one the incarnation starts at (the event's inbox_start). */
    if (&rec->pending != cmd) rec->pending = *cmd;
    rec->pending.inbox_index = start;
    rec->start = rec->pending;
    rec->init_event = success_kind;
    rec->init_old_head = old_head;
    rec->init_old_failed = old_failed;
    rec->init_dropped = dropped;
    rec->init_old_processed = old_processed;
    rv_store_release_dev_u32(&rec->pending_op, RV_OP_INIT);
}

/* Block 0, on the attention an init raised: the creation's event, Created/Restarted or CreateFailed, by the init's
 * own result (the slot may be Failed by then because the new incarnation crashed on a message: the caller reports
 * that next, as the incarnation's failure). */
RV_FN void rv_keeper_init_done(const rv_grid_view *g, uint32_t slot) {
    rv_keeper_record *rec = &g->keepers[slot];
    rv_store_release_dev_u32(&rec->pending_op, RV_OP_NONE); /* the actor reads it (rv_actor_init) */
    int32_t code = rec->init_result;
    rec->reported_state = code == RV_OK ? RV_STATE_ACTIVE : RV_STATE_FAILED;
    uint32_t kind = code == RV_OK ? rec->init_event : RV_EVT_CREATE_FAILED;
    rv_publish_processed(g, kind, slot, &rec->pending, code, rec->init_old_head, rec->init_old_failed,
                         rec->init_dropped, rec->init_old_processed);
}

RV_FN void rv_keeper_request(const rv_grid_view *g, const rv_command *cmd, uint32_t op) {
    rv_control_block *cb = &g->blocks[cmd->slot];
    rv_keeper_record *rec = &g->keepers[cmd->slot];
    rv_store_release_dev_u32(&rec->pending_op, cmd->op);
    rec->pending = *cmd;
    if (op == RV_OP_DRAIN) rv_store_relaxed_u32(&cb->drain_until, cmd->inbox_index);
    rv_store_relaxed_u32(&cb->request, op);
    rv_store_release_u32(&cb->request_seq, cb->request_seq + 1);
}

/* A host-given inbox index must lie within one inbox capacity of the device's head, on either side. */
RV_FN int rv_index_near(const rv_grid_view *g, uint32_t index, uint32_t head) {
    return (uint32_t)(index - head) <= g->inbox_capacity || (uint32_t)(head - index) <= g->inbox_capacity;
}

RV_FN int rv_init_valid(const rv_grid_view *g, const rv_command *cmd) {
    if (!rv_behaviour_known(g, cmd->behaviour)) return RV_ERR_UNKNOWN_BEHAVIOUR;
    if (cmd->init_len > RV_INIT_BYTES) return RV_ERR_BAD_COMMAND;
    return RV_OK;
}

/* Validates and executes one command. Publishes exactly one event now, or one when the actor acknowledges. */
RV_FN void rv_keeper_execute(const rv_grid_view *g, const rv_command *cmd) {
    if (cmd->slot >= g->slot_count) return rv_reject(g, cmd, RV_ERR_SLOT_RANGE);
    if (cmd->op < RV_OP_CREATE || cmd->op > RV_OP_RESUME) return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
    rv_control_block *cb = &g->blocks[cmd->slot];
    rv_keeper_record *rec = &g->keepers[cmd->slot];
    if (rec->pending_op != RV_OP_NONE) return rv_reject(g, cmd, RV_ERR_BUSY);
    if (cmd->expected_generation != cb->generation) return rv_reject(g, cmd, RV_ERR_STALE_GENERATION);
    uint32_t state = rv_load_acquire_u32(&cb->state);
    int running = state == RV_STATE_ACTIVE || state == RV_STATE_DRAINING;
    int rc;
    switch (cmd->op) {
    case RV_OP_CREATE:
        if (state != RV_STATE_DORMANT && state != RV_STATE_TERMINATED)
            return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((rc = rv_init_valid(g, cmd)) != RV_OK) return rv_reject(g, cmd, rc);
        if (!rv_index_near(g, cmd->inbox_index, cb->inbox_head)) return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        return rv_keeper_create(g, cmd, RV_EVT_CREATED);
    case RV_OP_RESTART:
        if (state == RV_STATE_DORMANT || state == RV_STATE_INITIALIZING)
            return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((rc = rv_init_valid(g, cmd)) != RV_OK) return rv_reject(g, cmd, rc);
        if (!rv_index_near(g, cmd->inbox_index, rv_load_acquire_u32(&cb->inbox_head)))
            return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        if (running) return rv_keeper_request(g, cmd, RV_OP_KILL);
        return rv_keeper_create(g, cmd, RV_EVT_RESTARTED);
    case RV_OP_KILL:
        if (running) return rv_keeper_request(g, cmd, RV_OP_KILL);
        if (state != RV_STATE_FAILED) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
        rec->reported_state = RV_STATE_TERMINATED;
        return rv_publish(g, RV_EVT_KILLED, cmd->slot, cmd, cb->last_error, cb->inbox_head, cb->failed_index,
                          rv_reclaim_k2k(g, cmd->slot));
    case RV_OP_DRAIN:
        if (state != RV_STATE_ACTIVE) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((uint32_t)(cmd->inbox_index - rv_load_acquire_u32(&cb->inbox_head)) > g->inbox_capacity)
            return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        return rv_keeper_request(g, cmd, RV_OP_DRAIN);
    default: /* RV_OP_RESUME */
        if (state != RV_STATE_DRAINING) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        return rv_keeper_request(g, cmd, RV_OP_RESUME);
    }
}

/* Block 0 changed something of `slot` that its actor must notice (a request, a re-creation): the actor's next
 * step is a full one. */
RV_FN void rv_touch_slot(const rv_grid_view *g, uint32_t slot) {
    rv_keeper_record *rec = &g->keepers[slot];
    rv_store_release_dev_u32(&rec->device_seq, rec->device_seq + 1);
    rv_mark_work(g, slot);
}

/* The host granted a restart in place of the incarnation that just failed in `slot` (its restart_grant names the
 * generation), block 0 knows how it was started, and the host's inbox tail is a plausible index. */
RV_FN int rv_restart_granted(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    return g->keepers[slot].start.op != RV_OP_NONE && rv_load_acquire_u32(&cb->restart_grant) == cb->generation &&
           rv_index_near(g, rv_load_acquire_u32(&cb->inbox_tail), cb->inbox_head);
}

/* Block 0 restarts a failed slot in place under the host's grant, without waiting for the host: the command
 * that started the incarnation, again, as a Restart with a cmd_id of its own (RV_GRANTED_CMD). The messages
 * queued up to `tail`, the host's tail read before the Failed event was published, are the host's to hand back;
 * those it sends once it has read the event are the new incarnation's (as for a restart the host submits). The
 * host must not reuse the cells of the ones it hands back before it has read them: grant_floor says where they
 * start, published before the new inbox head. */
RV_FN void rv_keeper_granted_restart(const rv_grid_view *g, uint32_t slot, uint32_t tail) {
    rv_control_block *cb = &g->blocks[slot];
    rv_command cmd = g->keepers[slot].start;
    uint32_t next = cb->generation + 1;
    cmd.op = RV_OP_RESTART;
    cmd.slot = slot;
    cmd.expected_generation = cb->generation;
    cmd.cmd_id = RV_GRANTED_CMD | ((uint64_t)slot << 32) | (uint64_t)next;
    cmd.inbox_index = tail;
    rv_store_relaxed_u32(&cb->grant_floor, cb->inbox_head);
    rv_store_release_u32(&cb->grant_floor_gen, next);
    rv_keeper_create(g, &cmd, RV_EVT_RESTARTED);
}

/* Looks at a slot whose actor raised attention: completes a pending command, reports a state change. */
RV_FN void rv_keeper_attend(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    rv_keeper_record *rec = &g->keepers[slot];
    if (rec->pending_op == RV_OP_INIT) {
        if (rv_load_acquire_u32(&cb->state) == RV_STATE_INITIALIZING) return;
        rv_keeper_init_done(g, slot); /* then a failure of the new incarnation, below */
    }
    if (rec->pending_op != RV_OP_NONE &&
        rv_load_acquire_u32(&cb->request_ack) == rv_load_relaxed_u32(&cb->request_seq)) {
        const rv_command *cmd = &rec->pending;
        uint32_t op = rec->pending_op;
        uint32_t state = rv_load_acquire_u32(&cb->state);
        rv_store_release_dev_u32(&rec->pending_op, RV_OP_NONE); /* the actor reads it (rv_actor_init) */
        if (op == RV_OP_KILL) {
            rec->reported_state = RV_STATE_TERMINATED;
            uint32_t dropped = rv_reclaim_k2k(g, slot);
            rv_publish(g, RV_EVT_KILLED, slot, cmd, cb->last_error, cb->inbox_head, cb->failed_index, dropped);
        } else if (op == RV_OP_RESTART) {
            rv_keeper_create(g, cmd, RV_EVT_RESTARTED);
        } else if (op == RV_OP_DRAIN && (state == RV_STATE_DRAINING || state == RV_STATE_TERMINATED)) {
            rec->reported_state = RV_STATE_DRAINING;
            rv_publish(g, RV_EVT_DRAINING, slot, cmd, 0, rv_load_acquire_u32(&cb->inbox_head), RV_NO_INDEX, 0);
        } else if (op == RV_OP_RESUME && state == RV_STATE_ACTIVE) {
            rec->reported_state = RV_STATE_ACTIVE;
            rv_publish(g, RV_EVT_RESUMED, slot, cmd, 0, rv_load_acquire_u32(&cb->inbox_head), RV_NO_INDEX, 0);
        } else {
            /* The actor failed before it could carry the request out: nothing changed by the command. */
            rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        }
    }
    uint32_t state = rv_load_acquire_u32(&cb->state);
    if (state == rec->reported_state || rec->pending_op != RV_OP_NONE) return;
    if (state == RV_STATE_FAILED) {
        /* The Failed event says whether a granted restart follows (op RV_OP_RESTART): the host learns it from
         * the same record as the failure, whatever it wrote to restart_grant meanwhile. */
        int granted = rv_restart_granted(g, slot);
        /* Read before the event is out: a message the host writes after it has read the event is not below it. */
        uint32_t tail = rv_load_acquire_u32(&cb->inbox_tail);
        rv_command note;
        rv_zero16(&note, sizeof(note) / 16);
        note.op = granted ? RV_OP_RESTART : RV_OP_NONE;
        rv_publish(g, RV_EVT_FAILED, slot, &note, cb->last_error, cb->inbox_head, cb->failed_index, 0);
        if (granted) rv_keeper_granted_restart(g, slot, tail);
    } else if (state == RV_STATE_TERMINATED && rec->reported_state == RV_STATE_DRAINING) {
        rv_publish(g, RV_EVT_DRAINED, slot, 0, 0, cb->inbox_head, RV_NO_INDEX, rv_reclaim_k2k(g, slot));
    }
    rec->reported_state = state;
}

/* Most events one rv_keeper_attend call can publish. */
#define RV_EVENTS_PER_ATTEND 3u

/* Block 0's heartbeat: counted in the local region, its copy stored into the shared header (a store, never a
 * read of mapped memory). It moves with every step, every slot attended and every command carried out, so a
 * block 0 busy with a burst (each record crosses PCIe on a GPU) is never taken for a dead one. */
RV_FN void rv_keeper_beat(const rv_grid_view *g) {
    uint64_t beats = g->local_header->keeper_beats + 1;
    g->local_header->keeper_beats = beats;
    rv_store_relaxed_u64(&g->header->keeper_heartbeat, beats);
}

RV_STEP_API uint32_t rv_keeper_step(const rv_grid_view *g) {
    rv_grid_header *h = g->header;
    uint32_t out = 0;
    /* An injected device stall or halt: block 0 does nothing, and its heartbeat stops. */
    if (rv_load_acquire_u32(&h->device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) return 0;
    rv_keeper_beat(g);

    /* 1. Slots that raised attention: the words the summary marks (a summary bit is cleared before its word is
     * taken, see rv_raise_attention). */
    uint32_t *summary = rv_attention_summary(g);
    uint32_t summary_words = (rv_attention_words(g->slot_count) + 31) / 32;
    for (uint32_t sw = 0; sw < summary_words; ++sw) {
        if (rv_load_relaxed_dev_u32(&summary[sw]) == 0) continue;
        uint32_t marked = rv_exchange_u32(&summary[sw], 0);
        while (marked != 0) {
            uint32_t w = sw * 32 + rv_ctz_u32(marked);
            marked &= marked - 1;
            uint32_t bits = rv_exchange_u32(&g->attention[w], 0);
            while (bits != 0) {
                if (rv_event_room(g) < RV_EVENTS_PER_ATTEND) {
                    /* Keep the rest for the next step: this word's bits, and the words not looked at yet. */
                    rv_fetch_or_u32(&g->attention[w], bits);
                    rv_fetch_or_u32(&summary[sw], marked | (1u << (w & 31u)));
                    return out;
                }
                uint32_t b = rv_ctz_u32(bits);
                bits &= bits - 1;
                rv_keeper_attend(g, w * 32 + b);
                rv_touch_slot(g, w * 32 + b);
                if (!RV_DEFECT(RV_DEFECT_KEEPER_BEATS_ONCE_A_STEP)) rv_keeper_beat(g);
                out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
            }
        }
    }

    /* 2. Commands, while an event can be published for each, at most RV_COMMANDS_PER_STEP of them: a burst of
     * commands does not keep block 0 from its other duties, and its heartbeat moves with every command (each
     * can take a while on a GPU, where the command and event rings are in host memory across PCIe). */
    uint32_t most = RV_COMMANDS_PER_STEP;
    if (RV_DEFECT(RV_DEFECT_KEEPER_BEATS_ONCE_A_STEP)) most = 1024u; /* the H100's block 0: every command at once */
    for (uint32_t n = 0; n < most; ++n) {
        uint32_t head = rv_load_relaxed_u32(&h->command_head);
        uint32_t tail = rv_load_acquire_u32(&h->command_tail);
        if (head == tail) break;
        if (rv_event_room(g) < RV_EVENTS_PER_ATTEND) break;
        if ((uint32_t)(tail - head) > g->command_capacity) {
            /* An impossible producer index: reject it once and skip to it. */
            rv_command bogus;
            rv_zero_bytes(&bogus, sizeof(bogus));
            bogus.slot = RV_NO_INDEX;
            rv_reject(g, &bogus, RV_ERR_BAD_COMMAND);
            rv_store_release_u32(&h->command_head, tail);
            out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
            continue;
        }
        rv_command cmd;
        rv_copy16_from_host(&cmd, &g->commands[head & (g->command_capacity - 1)], sizeof(rv_command) / 16);
        rv_keeper_execute(g, &cmd);
        if (cmd.slot < g->slot_count) rv_touch_slot(g, cmd.slot);
        rv_store_release_u32(&h->command_head, head + 1);
        rv_store_relaxed_u64(&h->commands_processed, rv_load_relaxed_u64(&h->commands_processed) + 1);
        if (!RV_DEFECT(RV_DEFECT_KEEPER_BEATS_ONCE_A_STEP)) rv_keeper_beat(g);
        out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
    }
    return out;
}

#endif /* RV_PROTOCOL_BLOCK0_CU */
