// protocol/block0.wgsl - block 0: the device's lifecycle executor (commands from the host, creations, kills, restarts
// by grant, the events it publishes, its heartbeat).
//
// Part of the WGSL port of the device protocol (read wgsl/rv_protocol.wgsl for the differences WebGPU forces);
// the twin of kernels/protocol/block0.cu (device/tests/protocol_mirror.rs keeps them in step).

// ---- block 0: the keeper ------------------------------------------------------------------------------------
const CMD_WORDS: u32 = SZ_command / 4u;
const EVT_WORDS: u32 = SZ_event / 4u;
// The command being executed (a copy of the ring's cell, or of a block-0 record).
var<private> k_cmd: array<u32, CMD_WORDS>;

fn k(field: u32) -> u32 { return k_cmd[field / 4u]; }
fn k_set(field: u32, v: u32) { k_cmd[field / 4u] = v; }
fn load_cmd_from_s(off: u32) { for (var i = U.zero; i < CMD_WORDS; i = i + 1u) { k_cmd[i] = s32(off + 4u * i); } }
fn load_cmd_from_l(off: u32) { for (var i = U.zero; i < CMD_WORDS; i = i + 1u) { k_cmd[i] = l32(off + 4u * i); } }
fn store_cmd_to_l(off: u32) { for (var i = U.zero; i < CMD_WORDS; i = i + 1u) { l32w(off + 4u * i, k_cmd[i]); } }
fn clear_cmd() { for (var i = U.zero; i < CMD_WORDS; i = i + 1u) { k_cmd[i] = 0u; } }

fn rv_event_room() -> u32 {
    let used = s32(O_grid_header_event_tail) - s32(O_grid_header_event_head);
    if (used >= g_evt_cap) { return 0u; }
    return g_evt_cap - used;
}

// Publishes an event; `with_cmd`: k_cmd is the command that caused it (cmd_id, op, inbox_start).
fn rv_publish_processed(kind: u32, slot: u32, with_cmd: bool, code: i32, inbox_head: u32, failed_index: u32,
                        k2k_dropped: u32, processed: vec2<u32>) {
    let tail = s32(O_grid_header_event_tail);
    let in_range = slot < g_slots;
    clear_t();
    t_env[O_event_kind / 4u] = kind;
    t_env[O_event_slot / 4u] = slot;
    if (in_range) {
        t_env[O_event_generation / 4u] = cbf(slot, O_control_block_generation);
        t_env[O_event_state / 4u] = cbf(slot, O_control_block_state);
    }
    t_env[O_event_code / 4u] = bitcast<u32>(code);
    t_env[O_event_inbox_head / 4u] = inbox_head;
    t_env[O_event_failed_index / 4u] = failed_index;
    t_env[O_event_k2k_dropped / 4u] = k2k_dropped;
    if (with_cmd) {
        t_env[O_event_cmd_id / 4u] = k(O_command_cmd_id);
        t_env[O_event_cmd_id / 4u + 1u] = k(O_command_cmd_id + 4u);
        t_env[O_event_op / 4u] = k(O_command_op);
        if (kind == RV_EVT_CREATED || kind == RV_EVT_RESTARTED || kind == RV_EVT_CREATE_FAILED) {
            t_env[O_event_inbox_start / 4u] = k(O_command_inbox_index);
        }
    }
    let now = rv_grid_now();
    t_env[O_event_time_ns / 4u] = now.x;
    t_env[O_event_time_ns / 4u + 1u] = now.y;
    t_env[O_event_messages_processed / 4u] = processed.x;
    t_env[O_event_messages_processed / 4u + 1u] = processed.y;
    store_t_to_s(g_events + (tail & (g_evt_cap - 1u)) * SZ_event, EVT_WORDS);
    s32w(O_grid_header_event_tail, tail + 1u);
    s64w(O_grid_header_events_published, u64_inc(s64(O_grid_header_events_published)));
}

fn rv_publish(kind: u32, slot: u32, with_cmd: bool, code: i32, inbox_head: u32, failed_index: u32, dropped: u32) {
    var processed = vec2<u32>(0u, 0u);
    if (slot < g_slots) { processed = s64(cb_at(slot) + O_control_block_messages_processed); }
    rv_publish_processed(kind, slot, with_cmd, code, inbox_head, failed_index, dropped, processed);
}

fn rv_reject(code: i32) {
    rv_publish(RV_EVT_REJECTED, k(O_command_slot), true, code, RV_NO_INDEX, RV_NO_INDEX, 0u);
}

// Empties the kernel-to-kernel ring of a slot that is not running (see rv_reclaim_k2k in the C reference).
fn rv_reclaim_k2k(slot: u32) -> u32 {
    let cb = cb_at(slot);
    let km = km_at(slot);
    var dropped = 0u;
    let first_tail = s32(cb + O_control_block_outbox_tail);
    var tail = first_tail;
    var room = g_outbox_cap - (tail - s32(cb + O_control_block_outbox_head));
    loop {
        let khead = l32(km + O_k2k_meta_head);
        let cell = kcell_at(slot, khead);
        if (!rv_k2k_ready(cell, khead, true)) { break; }
        let e = cell + O_k2k_cell_env;
        let w0 = l32(e);
        if (env_kind(w0) == RV_KIND_K2K) {
            if ((env_flags(w0) & RV_FLAG_NO_REPLY) != 0u) {
                dropped = dropped + 1u;
            } else {
                if (room == 0u) { break; }
                clear_t();
                t_env[0] = env_word0(RV_KIND_ERROR, 0u, SZ_error_payload);
                t_env[1] = slot;
                t_env[2] = RV_HOST_ENDPOINT;
                t_env[3] = s32(cb + O_control_block_generation);
                t_env[4] = l32(e + 16u);
                t_env[5] = l32(e + 20u);
                t_env[6] = s32(cb + O_control_block_hlc);
                t_env[7] = s32(cb + O_control_block_hlc + 4u);
                t_env[PAYLOAD_WORD] = bitcast<u32>(RV_ERR_TARGET_GONE);
                t_env[PAYLOAD_WORD + 1u] = slot;
                store_t_to_s(outbox_cell(slot, tail), ENV_WORDS);
                tail = tail + 1u;
                room = room - 1u;
            }
        }
        rv_k2k_release(km, cell, khead);
    }
    if (tail != first_tail) { s32w(cb + O_control_block_outbox_tail, tail); }
    s32w(cb + O_control_block_k2k_dropped, s32(cb + O_control_block_k2k_dropped) + dropped);
    return dropped;
}

// (Re)creates a slot that is not running, for the command in k_cmd.
fn rv_keeper_create(success_kind: u32) {
    let slot = k(O_command_slot);
    let cb = cb_at(slot);
    let rec = keeper_at(slot);
    let old_head = s32(cb + O_control_block_inbox_head);
    let old_failed = s32(cb + O_control_block_failed_index);
    let old_processed = s64(cb + O_control_block_messages_processed);
    s32w(cb + O_control_block_state, RV_STATE_INITIALIZING);
    let st = state_at(slot);
    for (var i = 0u; i < g_state_bytes; i = i + 4u) { l32w(st + i, 0u); }
    let dropped = rv_reclaim_k2k(slot);
    s32w(cb + O_control_block_generation, s32(cb + O_control_block_generation) + 1u);
    s64w(cb + O_control_block_heartbeat, vec2<u32>(0u, 0u));
    s64w(cb + O_control_block_messages_processed, vec2<u32>(0u, 0u));
    s32w(cb + O_control_block_last_error, 0u);
    s32w(cb + O_control_block_behaviour, k(O_command_behaviour));
    s32w(cb + O_control_block_failed_index, RV_NO_INDEX);
    s32w(cb + O_control_block_k2k_sent, 0u);
    s32w(cb + O_control_block_k2k_received, 0u);
    s32w(cb + O_control_block_bad_envelopes, 0u);
    s64w(cb + O_control_block_stall_until_ns, vec2<u32>(0u, 0u));
    s32w(cb + O_control_block_fault_ack, s32(cb + O_control_block_fault_seq));
    s64w(cb + O_control_block_hlc, rv_hlc_next(s64(cb + O_control_block_hlc), vec2<u32>(0u, 0u)));
    var consumed_end = old_head;
    if (old_failed != RV_NO_INDEX && old_failed == old_head) { consumed_end = old_head + 1u; }
    var start = k(O_command_inbox_index);
    if (bitcast<i32>(consumed_end - start) > 0) { start = consumed_end; }
    s32w(cb + O_control_block_inbox_head, start);
    k_set(O_command_inbox_index, start);
    store_cmd_to_l(rec + O_keeper_record_pending);
    store_cmd_to_l(rec + O_keeper_record_start);
    l32w(rec + O_keeper_record_init_event, success_kind);
    l32w(rec + O_keeper_record_init_old_head, old_head);
    l32w(rec + O_keeper_record_init_old_failed, old_failed);
    l32w(rec + O_keeper_record_init_dropped, dropped);
    l64w(rec + O_keeper_record_init_old_processed, old_processed);
    l32w(rec + O_keeper_record_pending_op, RV_OP_INIT);
}

// By the init's own result (rv_protocol.cu's rv_keeper_init_done): a failure of the new incarnation is reported next.
fn rv_keeper_init_done(slot: u32) {
    let rec = keeper_at(slot);
    l32w(rec + O_keeper_record_pending_op, RV_OP_NONE);
    let code = bitcast<i32>(l32(rec + O_keeper_record_init_result));
    var kind = RV_EVT_CREATE_FAILED;
    var reported = RV_STATE_FAILED;
    if (code == RV_OK) {
        kind = l32(rec + O_keeper_record_init_event);
        reported = RV_STATE_ACTIVE;
    }
    l32w(rec + O_keeper_record_reported_state, reported);
    load_cmd_from_l(rec + O_keeper_record_pending);
    rv_publish_processed(kind, slot, true, code, l32(rec + O_keeper_record_init_old_head),
                         l32(rec + O_keeper_record_init_old_failed), l32(rec + O_keeper_record_init_dropped),
                         l64(rec + O_keeper_record_init_old_processed));
}

fn rv_keeper_request(op: u32) {
    let slot = k(O_command_slot);
    let cb = cb_at(slot);
    let rec = keeper_at(slot);
    l32w(rec + O_keeper_record_pending_op, k(O_command_op));
    store_cmd_to_l(rec + O_keeper_record_pending);
    if (op == RV_OP_DRAIN) { s32w(cb + O_control_block_drain_until, k(O_command_inbox_index)); }
    s32w(cb + O_control_block_request, op);
    s32w(cb + O_control_block_request_seq, s32(cb + O_control_block_request_seq) + 1u);
}

fn rv_index_near(index: u32, head: u32) -> bool {
    return index - head <= g_inbox_cap || head - index <= g_inbox_cap;
}

fn rv_init_valid() -> i32 {
    if (rv_behaviour_known(k(O_command_behaviour)) == 0u) { return RV_ERR_UNKNOWN_BEHAVIOUR; }
    if (k(O_command_init_len) > RV_INIT_BYTES) { return RV_ERR_BAD_COMMAND; }
    return RV_OK;
}

fn rv_keeper_execute() {
    let slot = k(O_command_slot);
    let op = k(O_command_op);
    if (slot >= g_slots) { rv_reject(RV_ERR_SLOT_RANGE); return; }
    if (op < RV_OP_CREATE || op > RV_OP_RESUME) { rv_reject(RV_ERR_BAD_COMMAND); return; }
    let cb = cb_at(slot);
    let rec = keeper_at(slot);
    if (l32(rec + O_keeper_record_pending_op) != RV_OP_NONE) { rv_reject(RV_ERR_BUSY); return; }
    if (k(O_command_expected_generation) != s32(cb + O_control_block_generation)) {
        rv_reject(RV_ERR_STALE_GENERATION);
        return;
    }
    let state = s32(cb + O_control_block_state);
    let running = state == RV_STATE_ACTIVE || state == RV_STATE_DRAINING;
    let head = s32(cb + O_control_block_inbox_head);
    switch (op) {
        case RV_OP_CREATE: {
            if (state != RV_STATE_DORMANT && state != RV_STATE_TERMINATED) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            let rc = rv_init_valid();
            if (rc != RV_OK) { rv_reject(rc); return; }
            if (!rv_index_near(k(O_command_inbox_index), head)) { rv_reject(RV_ERR_BAD_COMMAND); return; }
            rv_keeper_create(RV_EVT_CREATED);
        }
        case RV_OP_RESTART: {
            if (state == RV_STATE_DORMANT || state == RV_STATE_INITIALIZING) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            let rc = rv_init_valid();
            if (rc != RV_OK) { rv_reject(rc); return; }
            if (!rv_index_near(k(O_command_inbox_index), head)) { rv_reject(RV_ERR_BAD_COMMAND); return; }
            if (running) { rv_keeper_request(RV_OP_KILL); return; }
            rv_keeper_create(RV_EVT_RESTARTED);
        }
        case RV_OP_KILL: {
            if (running) { rv_keeper_request(RV_OP_KILL); return; }
            if (state != RV_STATE_FAILED) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            s32w(cb + O_control_block_state, RV_STATE_TERMINATED);
            l32w(rec + O_keeper_record_reported_state, RV_STATE_TERMINATED);
            let dropped = rv_reclaim_k2k(slot);
            rv_publish(RV_EVT_KILLED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)), head,
                       s32(cb + O_control_block_failed_index), dropped);
        }
        case RV_OP_DRAIN: {
            if (state != RV_STATE_ACTIVE) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            if (k(O_command_inbox_index) - head > g_inbox_cap) { rv_reject(RV_ERR_BAD_COMMAND); return; }
            rv_keeper_request(RV_OP_DRAIN);
        }
        default: {
            if (state != RV_STATE_DRAINING) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            rv_keeper_request(RV_OP_RESUME);
        }
    }
}

fn rv_touch_slot(slot: u32) {
    let rec = keeper_at(slot);
    l32w(rec + O_keeper_record_device_seq, l32(rec + O_keeper_record_device_seq) + 1u);
}

fn rv_restart_granted(slot: u32) -> bool {
    let cb = cb_at(slot);
    return l32(keeper_at(slot) + O_keeper_record_start + O_command_op) != RV_OP_NONE &&
           s32(cb + O_control_block_restart_grant) == s32(cb + O_control_block_generation) &&
           rv_index_near(s32(cb + O_control_block_inbox_tail), s32(cb + O_control_block_inbox_head));
}

// `tail`: the host's inbox tail read before the Failed event was published (rv_protocol.cu's rv_keeper_granted_restart).
fn rv_keeper_granted_restart(slot: u32, tail: u32) {
    let cb = cb_at(slot);
    load_cmd_from_l(keeper_at(slot) + O_keeper_record_start);
    let generation = s32(cb + O_control_block_generation);
    let next = generation + 1u;
    k_set(O_command_op, RV_OP_RESTART);
    k_set(O_command_slot, slot);
    k_set(O_command_expected_generation, generation);
    k_set(O_command_cmd_id, next);
    k_set(O_command_cmd_id + 4u, RV_GRANTED_CMD_HI | slot);
    k_set(O_command_inbox_index, tail);
    s32w(cb + O_control_block_grant_floor, s32(cb + O_control_block_inbox_head));
    s32w(cb + O_control_block_grant_floor_gen, next);
    rv_keeper_create(RV_EVT_RESTARTED);
}

fn rv_keeper_attend(slot: u32) {
    let cb = cb_at(slot);
    let rec = keeper_at(slot);
    var pending = l32(rec + O_keeper_record_pending_op);
    if (pending == RV_OP_INIT) {
        if (s32(cb + O_control_block_state) == RV_STATE_INITIALIZING) { return; }
        rv_keeper_init_done(slot); // then a failure of the new incarnation, below
        pending = RV_OP_NONE;
    }
    if (pending != RV_OP_NONE && s32(cb + O_control_block_request_ack) == s32(cb + O_control_block_request_seq)) {
        load_cmd_from_l(rec + O_keeper_record_pending);
        let state = s32(cb + O_control_block_state);
        l32w(rec + O_keeper_record_pending_op, RV_OP_NONE);
        if (pending == RV_OP_KILL) {
            l32w(rec + O_keeper_record_reported_state, RV_STATE_TERMINATED);
            let dropped = rv_reclaim_k2k(slot);
            rv_publish(RV_EVT_KILLED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)),
                       s32(cb + O_control_block_inbox_head), s32(cb + O_control_block_failed_index), dropped);
        } else if (pending == RV_OP_RESTART) {
            rv_keeper_create(RV_EVT_RESTARTED);
        } else if (pending == RV_OP_DRAIN && (state == RV_STATE_DRAINING || state == RV_STATE_TERMINATED)) {
            l32w(rec + O_keeper_record_reported_state, RV_STATE_DRAINING);
            rv_publish(RV_EVT_DRAINING, slot, true, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, 0u);
        } else if (pending == RV_OP_RESUME && state == RV_STATE_ACTIVE) {
            l32w(rec + O_keeper_record_reported_state, RV_STATE_ACTIVE);
            rv_publish(RV_EVT_RESUMED, slot, true, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, 0u);
        } else {
            rv_reject(RV_ERR_ILLEGAL_TRANSITION);
        }
    }
    let state = s32(cb + O_control_block_state);
    if (state == l32(rec + O_keeper_record_reported_state) || l32(rec + O_keeper_record_pending_op) != RV_OP_NONE) { return; }
    if (state == RV_STATE_FAILED) {
        let granted = rv_restart_granted(slot);
        let tail = s32(cb + O_control_block_inbox_tail); // before the event is out
        clear_cmd();
        k_set(O_command_op, select(RV_OP_NONE, RV_OP_RESTART, granted));
        rv_publish(RV_EVT_FAILED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)),
                   s32(cb + O_control_block_inbox_head), s32(cb + O_control_block_failed_index), 0u);
        if (granted) { rv_keeper_granted_restart(slot, tail); }
    } else if (state == RV_STATE_TERMINATED && l32(rec + O_keeper_record_reported_state) == RV_STATE_DRAINING) {
        let dropped = rv_reclaim_k2k(slot);
        rv_publish(RV_EVT_DRAINED, slot, false, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, dropped);
    }
    l32w(rec + O_keeper_record_reported_state, state);
}

const RV_EVENTS_PER_ATTEND: u32 = 3u;

// Commands block 0 executes per dispatch here (RV_COMMANDS_PER_STEP, 64, elsewhere too): one invocation runs them
// one after the other, so a long burst is spread over several dispatches instead of one long one (a GPU's
// watchdog bounds a dispatch). On lavapipe (Mesa 22.3), a dispatch that executed more than about 110 creates
// lost the keeper records of a few of them (one in about 120; see docs/architecture.md, known limits).
const KEEPER_COMMANDS_PER_DISPATCH: u32 = 64u;

fn rv_keeper_step() -> u32 {
    var out = 0u;
    if (rv_device_faulted()) { return 0u; }
    s64w(O_grid_header_keeper_heartbeat, u64_inc(s64(O_grid_header_keeper_heartbeat)));
    // The words the summary marks (a summary bit is cleared before its word is taken).
    let summary = (g_attention >> 2u) + rv_attention_words();
    let summary_words = (rv_attention_words() + 31u) / 32u;
    for (var sw = 0u; sw < summary_words; sw = sw + 1u) {
        if (atomicLoad(&L[summary + sw]) == 0u) { continue; }
        var marked = atomicExchange(&L[summary + sw], 0u);
        loop {
            if (marked == 0u) { break; }
            let w = sw * 32u + countTrailingZeros(marked);
            marked = marked & (marked - 1u);
            let at = (g_attention >> 2u) + w;
            var bits = atomicExchange(&L[at], 0u);
            loop {
                if (bits == 0u) { break; }
                if (rv_event_room() < RV_EVENTS_PER_ATTEND) {
                    // Keep the rest for the next dispatch: this word's bits, and the words not looked at yet.
                    atomicOr(&L[at], bits);
                    atomicOr(&L[summary + sw], marked | (1u << (w & 31u)));
                    return out;
                }
                let b = countTrailingZeros(bits);
                bits = bits & (bits - 1u);
                rv_keeper_attend(w * 32u + b);
                rv_touch_slot(w * 32u + b);
                s64w(O_grid_header_keeper_heartbeat, u64_inc(s64(O_grid_header_keeper_heartbeat)));
                out = out | RV_STEP_PROGRESS | RV_STEP_REPLIED;
            }
        }
    }
    for (var n = 0u; n < KEEPER_COMMANDS_PER_DISPATCH; n = n + 1u) {
        let head = s32(O_grid_header_command_head);
        let tail = s32(O_grid_header_command_tail);
        if (head == tail) { break; }
        if (rv_event_room() < RV_EVENTS_PER_ATTEND) { break; }
        if (tail - head > g_cmd_cap) {
            clear_cmd();
            k_set(O_command_slot, RV_NO_INDEX);
            rv_reject(RV_ERR_BAD_COMMAND);
            s32w(O_grid_header_command_head, tail);
            out = out | RV_STEP_PROGRESS | RV_STEP_REPLIED;
            continue;
        }
        load_cmd_from_s(g_commands + (head & (g_cmd_cap - 1u)) * SZ_command);
        let slot = k(O_command_slot);
        rv_keeper_execute();
        if (slot < g_slots) { rv_touch_slot(slot); }
        s32w(O_grid_header_command_head, head + 1u);
        s64w(O_grid_header_commands_processed, u64_inc(s64(O_grid_header_commands_processed)));
        s64w(O_grid_header_keeper_heartbeat, u64_inc(s64(O_grid_header_keeper_heartbeat)));
        out = out | RV_STEP_PROGRESS | RV_STEP_REPLIED;
    }
    return out;
}
