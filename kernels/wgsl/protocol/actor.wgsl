// protocol/actor.wgsl - the actor step: what an actor block does for each of its slots (requests from block 0, inits,
// inbox and kernel-to-kernel messages, failures, idle beats).
//
// Part of the WGSL port of the device protocol (read wgsl/rv_protocol.wgsl for the differences WebGPU forces);
// the twin of kernels/protocol/actor.cu (device/tests/protocol_mirror.rs keeps them in step).

// ---- the actor step --------------------------------------------------------------------------------------------
fn rv_actor_handle_request(slot: u32, seq: u32) {
    let cb = cb_at(slot);
    let request = s32(cb + O_control_block_request);
    let state = s32(cb + O_control_block_state);
    if (request == RV_OP_KILL) {
        s64w(cb + O_control_block_stall_until_ns, vec2<u32>(0u, 0u));
        s32w(cb + O_control_block_state, RV_STATE_TERMINATED);
    } else if (request == RV_OP_DRAIN && state == RV_STATE_ACTIVE) {
        s32w(cb + O_control_block_state, RV_STATE_DRAINING);
    } else if (request == RV_OP_RESUME && state == RV_STATE_DRAINING) {
        s32w(cb + O_control_block_state, RV_STATE_ACTIVE);
    }
    s32w(cb + O_control_block_request_ack, seq);
    rv_raise_attention(slot);
}

fn rv_actor_fail(slot: u32, code: i32, index: u32) {
    let cb = cb_at(slot);
    s32w(cb + O_control_block_last_error, bitcast<u32>(code));
    s32w(cb + O_control_block_failed_index, index);
    s32w(cb + O_control_block_state, RV_STATE_FAILED);
    rv_raise_attention(slot);
}

fn rv_outbox_has_room(slot: u32) -> bool {
    let cb = cb_at(slot);
    return s32(cb + O_control_block_outbox_tail) - s32(cb + O_control_block_outbox_head) < g_outbox_cap;
}

// The current message (m_env, from the host) is well formed.
fn rv_envelope_valid(slot: u32) -> bool {
    let kind = m_kind();
    if (kind != RV_KIND_USER && kind != RV_KIND_STATE && kind != RV_KIND_K2K) { return false; }
    if (m_len() > RV_PAYLOAD_BYTES || m_env[2] != slot) { return false; }
    // a routed kernel-to-kernel message (the host delivers it here): inline only
    if (kind == RV_KIND_K2K) { return (m_flags() & RV_FLAG_BULK) == 0u; }
    if ((m_flags() & RV_FLAG_BULK) == 0u) { return true; }
    return rv_bulk_at(g_inbox_bulk, slot, m_env[0], m_env[PAYLOAD_WORD], m_env[PAYLOAD_WORD + 1u]) != RV_NO_INDEX;
}

// The bytes a state read asks for: the region's first N bytes when its inline payload is a u32 N, capped at the
// region; the whole region when the payload is empty (rv_protocol.cu's rv_state_read_len).
fn rv_state_read_len() -> u32 {
    if (m_len() < 4u || (m_flags() & RV_FLAG_BULK) != 0u) { return g_state_bytes; }
    return min(m_env[PAYLOAD_WORD], g_state_bytes);
}

fn rv_ctx_next() { c_hlc = rv_hlc_next(c_hlc, vec2<u32>(m_env[6], m_env[7])); }

fn rv_actor_run(slot: u32, injected: i32) -> i32 {
    let cb = cb_at(slot);
    var rc = injected;
    if (rc == RV_OK) { rc = rv_dispatch(s32(cb + O_control_block_behaviour)); }
    if (rc == RV_OK) {
        s64w(cb + O_control_block_messages_processed, u64_inc(s64(cb + O_control_block_messages_processed)));
    } else {
        rv_finish_message(false);
    }
    return rc;
}

fn rv_stall_requested(slot: u32) -> bool { return !u64_is_zero(s64(cb_at(slot) + O_control_block_stall_until_ns)); }

fn rv_k2k_release(km: u32, cell: u32, khead: u32) {
    let w0 = l32(cell + O_k2k_cell_env);
    if ((env_flags(w0) & RV_FLAG_BULK) != 0u) {
        l32w(km + O_k2k_meta_bulk_head, l32(cell + O_k2k_cell_env + O_envelope_payload));
    }
    l32w(cell + O_k2k_cell_seq, rv_k2k_seq_now(khead + g_k2k_cap));
    l32w(km + O_k2k_meta_head, khead + 1u);
}

fn rv_k2k_waiting(slot: u32) -> bool {
    let khead = l32(km_at(slot) + O_k2k_meta_head);
    return rv_k2k_seq_pos(l32(kcell_at(slot, khead) + O_k2k_cell_seq)) == ((khead + 1u) & 0x7FFFFFFFu);
}

fn rv_beat(slot: u32) {
    let ar = ar_at(slot);
    let beats = u64_inc(l64(ar + O_actor_record_beats));
    l64w(ar + O_actor_record_beats, beats);
    s64w(cb_at(slot) + O_control_block_heartbeat, beats);
}

fn rv_device_faulted() -> bool {
    return (s32(O_grid_header_device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) != 0u;
}

fn rv_actor_idle(slot: u32, host_seq: u32, device_seq: u32) -> bool {
    let ar = ar_at(slot);
    let quiet = l32(ar + O_actor_record_quiet);
    if (quiet == RV_QUIET_NO || host_seq != l32(ar + O_actor_record_seen_host_seq) ||
        device_seq != l32(ar + O_actor_record_seen_device_seq)) {
        return false;
    }
    if (quiet == RV_QUIET_ACTIVE) {
        if (rv_k2k_waiting(slot)) { return false; }
        let now = rv_grid_coarse();
        if (!u64_lt(now, l64(ar + O_actor_record_next_beat_ns))) {
            if (rv_device_faulted()) { return true; }
            l64w(ar + O_actor_record_next_beat_ns, u64_add(now, u64_of(RV_IDLE_BEAT_NS)));
            rv_beat(slot);
        }
    }
    return true;
}

// Whether `slot` has nothing to do in this dispatch (beating at the idle rate if it is Active).
fn rv_slot_idle(slot: u32) -> bool {
    return rv_actor_idle(slot, s32(cb_at(slot) + O_control_block_host_seq), l32(keeper_at(slot) + O_keeper_record_device_seq));
}

// On the actor's workgroup: the behaviour's init for a creation block 0 prepared.
fn rv_actor_init(slot: u32) -> u32 {
    let cb = cb_at(slot);
    let rec = keeper_at(slot);
    if (l32(rec + O_keeper_record_pending_op) != RV_OP_INIT) { return 0u; }
    let cmd = rec + O_keeper_record_pending;
    let init_len = min(l32(cmd + O_command_init_len), RV_INIT_BYTES);
    for (var i = U.zero; i < ENV_WORDS; i = i + 1u) { m_env[i] = 0u; }
    m_env[0] = env_word0(RV_KIND_INIT, RV_FLAG_NO_REPLY, init_len);
    m_env[1] = RV_HOST_ENDPOINT;
    m_env[2] = slot;
    m_env[3] = s32(cb + O_control_block_generation);
    m_env[4] = l32(cmd + O_command_cmd_id);
    m_env[5] = l32(cmd + O_command_cmd_id + 4u);
    m_env[6] = s32(cb + O_control_block_hlc);
    m_env[7] = s32(cb + O_control_block_hlc + 4u);
    for (var i = 0u; 4u * i < init_len; i = i + 1u) {
        var w = l32(cmd + O_command_init + 4u * i);
        let have = init_len - 4u * i;
        if (have < 4u) { w = w & ((1u << (have * 8u)) - 1u); }
        m_env[PAYLOAD_WORD + i] = w;
    }
    rv_ctx_init(slot, 1u);
    var rc = rv_dispatch(l32(cmd + O_command_behaviour));
    if (rc == RV_STALL) { rc = RV_ERR_NOT_ALLOWED; }
    // the init's outcome, apart from the state (the incarnation may fail on a message before block 0 looks)
    l32w(rec + O_keeper_record_init_result, bitcast<u32>(rc));
    if (rc == RV_OK) {
        s32w(cb + O_control_block_state, RV_STATE_ACTIVE);
    } else {
        s32w(cb + O_control_block_last_error, bitcast<u32>(rc));
        s32w(cb + O_control_block_state, RV_STATE_FAILED);
    }
    rv_raise_attention(slot);
    return RV_STEP_PROGRESS | RV_STEP_ATTENTION;
}

// The step of a slot the scan found not idle (rv_actor_step in the C code, after its idle check).
fn rv_actor_step(slot: u32, budget: u32) -> u32 {
    if (slot >= g_slots) { return 0u; }
    let cb = cb_at(slot);
    let ar = ar_at(slot);
    let host_seq = s32(cb + O_control_block_host_seq);
    let device_seq = l32(keeper_at(slot) + O_keeper_record_device_seq);
    l32w(ar + O_actor_record_quiet, RV_QUIET_NO);
    l32w(ar + O_actor_record_seen_host_seq, host_seq);
    l32w(ar + O_actor_record_seen_device_seq, device_seq);
    if (rv_device_faulted()) { return 0u; }
    if ((s32(cb + O_control_block_fault_flags) & RV_FAULT_WEDGE) != 0u) { return 0u; }
    var out = 0u;
    let seq = s32(cb + O_control_block_request_seq);
    if (seq != s32(cb + O_control_block_request_ack)) {
        rv_actor_handle_request(slot, seq);
        out = out | RV_STEP_PROGRESS | RV_STEP_ATTENTION;
    }
    let state = s32(cb + O_control_block_state);
    if (state == RV_STATE_INITIALIZING) { return out | rv_actor_init(slot); }
    if (state != RV_STATE_ACTIVE && state != RV_STATE_DRAINING) {
        if (out == 0u) { l32w(ar + O_actor_record_quiet, RV_QUIET_STOPPED); }
        return out;
    }
    let tail = s32(cb + O_control_block_inbox_tail);
    let faults = s32(cb + O_control_block_fault_flags);
    if ((faults & RV_FAULT_STALL) != 0u) { return out; }
    let stall_until = s64(cb + O_control_block_stall_until_ns);
    if (!u64_is_zero(stall_until)) {
        if (u64_lt(rv_grid_now(), stall_until)) { return out; }
        s64w(cb + O_control_block_stall_until_ns, vec2<u32>(0u, 0u));
    }

    rv_ctx_init(slot, 0u);
    var done = 0u;
    var head = s32(cb + O_control_block_inbox_head);
    var limit = tail;
    if (state == RV_STATE_DRAINING) { limit = s32(cb + O_control_block_drain_until); }
    if (tail - head > g_inbox_cap || limit - head > g_inbox_cap) {
        rv_actor_fail(slot, RV_ERR_BAD_ENVELOPE, RV_NO_INDEX);
        return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    var stalled = false;

    // Kernel-to-kernel inbox first.
    let km = km_at(slot);
    var k2k_pending = false;
    loop {
        if (stalled) { break; }
        let khead = l32(km + O_k2k_meta_head);
        let cell = kcell_at(slot, khead);
        if (!rv_k2k_ready(cell, khead, false)) {
            // published in this dispatch: taken in the next one (the step reports progress so there is one)
            if (rv_k2k_waiting(slot)) { k2k_pending = true; out = out | RV_STEP_PROGRESS; }
            break;
        }
        if (done >= budget || !rv_outbox_has_room(slot)) {
            k2k_pending = true;
            break;
        }
        if (env_kind(l32(cell + O_k2k_cell_env)) == RV_KIND_K2K) {
            load_msg_from_l(cell + O_k2k_cell_env);
            rv_ctx_next();
            let rc = rv_actor_run(slot, RV_OK);
            if (rc == RV_STALL) {
                stalled = true;
                break;
            }
            if (rc != RV_OK) {
                if ((m_flags() & RV_FLAG_NO_REPLY) != 0u) {
                    s32w(cb + O_control_block_k2k_dropped, s32(cb + O_control_block_k2k_dropped) + 1u);
                } else {
                    rv_reply_error(rc, slot);
                    out = out | rv_finish_message(true);
                }
                rv_k2k_release(km, cell, khead);
                s64w(cb + O_control_block_hlc, c_hlc);
                rv_actor_fail(slot, rc, RV_NO_INDEX);
                return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
            }
            s32w(cb + O_control_block_k2k_received, s32(cb + O_control_block_k2k_received) + 1u);
            rv_k2k_release(km, cell, khead);
            out = out | rv_finish_message(true);
        } else {
            rv_k2k_release(km, cell, khead);
        }
        done = done + 1u;
        if (rv_stall_requested(slot)) {
            stalled = true;
            break;
        }
    }

    // Host inbox.
    loop {
        if (stalled || done >= budget || head == limit) { break; }
        if (!rv_outbox_has_room(slot)) { break; }
        load_msg_from_s(inbox_cell(slot, head));
        rv_ctx_next();
        let fault_seq = s32(cb + O_control_block_fault_seq);
        let corrupt = (faults & RV_FAULT_CORRUPT_NEXT) != 0u && fault_seq != s32(cb + O_control_block_fault_ack);
        if (corrupt) { s32w(cb + O_control_block_fault_ack, fault_seq); }
        if (corrupt || !rv_envelope_valid(slot)) {
            s32w(cb + O_control_block_bad_envelopes, s32(cb + O_control_block_bad_envelopes) + 1u);
            rv_reply_error(RV_ERR_BAD_ENVELOPE, m_kind());
            head = head + 1u;
            out = out | rv_consume_and_finish(head);
            done = done + 1u;
            continue;
        }
        if (m_kind() == RV_KIND_STATE) {
            let len = rv_state_read_len();
            let rc = rv_stage_reply(RV_KIND_REPLY, SRC_L, state_at(slot), len);
            if (rc == RV_ERR_OUTBOX_FULL) { break; }
            if (rc != RV_OK) { rv_reply_error(rc, len); }
            head = head + 1u;
            out = out | rv_consume_and_finish(head);
            done = done + 1u;
            continue;
        }
        var injected = RV_OK;
        if ((faults & RV_FAULT_CRASH_NEXT) != 0u && fault_seq != s32(cb + O_control_block_fault_ack)) {
            s32w(cb + O_control_block_fault_ack, fault_seq);
            injected = RV_ERR_INJECTED;
        }
        let rc = rv_actor_run(slot, injected);
        if (rc == RV_STALL) {
            stalled = true;
            break;
        }
        if (rc != RV_OK) {
            s64w(cb + O_control_block_hlc, c_hlc);
            rv_actor_fail(slot, rc, head);
            return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
        }
        if (m_kind() == RV_KIND_K2K) {
            s32w(cb + O_control_block_k2k_received, s32(cb + O_control_block_k2k_received) + 1u);
        }
        head = head + 1u;
        out = out | rv_consume_and_finish(head);
        done = done + 1u;
        if (rv_stall_requested(slot)) {
            stalled = true;
            break;
        }
    }

    s64w(cb + O_control_block_hlc, c_hlc);
    if (done > 0u) { out = out | RV_STEP_PROGRESS; }
    if (!stalled || done > 0u) { rv_beat(slot); }
    if (state == RV_STATE_DRAINING && head == limit && !k2k_pending && !stalled) {
        s32w(cb + O_control_block_state, RV_STATE_TERMINATED);
        rv_raise_attention(slot);
        out = out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    if (out == 0u && !stalled && !k2k_pending && head == limit && state == RV_STATE_ACTIVE) {
        l32w(ar + O_actor_record_quiet, RV_QUIET_ACTIVE);
        l64w(ar + O_actor_record_next_beat_ns, u64_add(rv_grid_coarse(), u64_of(RV_IDLE_BEAT_NS)));
    }
    return out;
}
