// protocol/api.wgsl - the behaviour API: what a behaviour calls (state, payload, reply, send, forward, stall), and how
// a message's staged effects are published or voided (rv_finish_message).
//
// Part of the WGSL port of the device protocol (read wgsl/rv_protocol.wgsl for the differences WebGPU forces);
// the twin of kernels/protocol/api.cu (device/tests/protocol_mirror.rs keeps them in step).

// ---- the behaviour context -----------------------------------------------------------------------------------
var<private> c_slot: u32;
var<private> c_generation: u32;
var<private> c_init_phase: u32;
var<private> c_hlc: vec2<u32>;
var<private> c_reply_staged: u32;
var<private> c_reply_bulk: u32;
var<private> c_reply_bulk_end: u32;
var<private> c_reply_forwarded: u32;
var<private> c_send_count: u32;
var<private> c_routed_count: u32; // routed sends staged in the outbox past its tail (published on commit)
var<private> c_send_cells: array<u32, RV_MAX_SENDS_PER_MESSAGE>;
var<private> c_send_pos: array<u32, RV_MAX_SENDS_PER_MESSAGE>;
var<private> c_send_dst: array<u32, RV_MAX_SENDS_PER_MESSAGE>;

fn rv_ctx_init(slot: u32, init_phase: u32) {
    c_slot = slot;
    c_generation = cbf(slot, O_control_block_generation);
    c_init_phase = init_phase;
    c_hlc = s64(cb_at(slot) + O_control_block_hlc);
    c_reply_staged = 0u;
    c_reply_bulk = 0u;
    c_reply_forwarded = 0u;
    c_send_count = 0u;
    c_routed_count = 0u;
}

fn rv_max_payload() -> u32 { return max(g_bulk, RV_PAYLOAD_BYTES); }

// The current message's payload: where its bytes are (a source and an offset) and how many.
fn m_payload_src() -> u32 {
    if ((m_flags() & RV_FLAG_BULK) == 0u) { return SRC_MSG; }
    if (m_kind() == RV_KIND_K2K) { return SRC_L; }
    return SRC_S;
}
fn m_bulk_at() -> u32 {
    var areas = g_inbox_bulk;
    if (m_kind() == RV_KIND_K2K) { areas = g_k2k_bulk; }
    return rv_bulk_at(areas, c_slot, m_env[0], m_env[PAYLOAD_WORD], m_env[PAYLOAD_WORD + 1u]);
}
fn rv_payload_len() -> u32 {
    if ((m_flags() & RV_FLAG_BULK) == 0u) { return select(0u, m_len(), m_len() <= RV_PAYLOAD_BYTES); }
    if (m_bulk_at() == RV_NO_INDEX) { return 0u; }
    return m_env[PAYLOAD_WORD + 1u];
}
// The source and offset of the payload's byte `at` (a bad bulk reference reads as the inline payload).
fn m_payload_off(at: u32) -> u32 {
    if ((m_flags() & RV_FLAG_BULK) == 0u) { return at; }
    let p = m_bulk_at();
    if (p == RV_NO_INDEX) { return at; }
    return p + at;
}
fn m_payload_src_checked() -> u32 {
    if ((m_flags() & RV_FLAG_BULK) != 0u && m_bulk_at() == RV_NO_INDEX) { return SRC_MSG; }
    return m_payload_src();
}

fn rv_stage_reply(kind: u32, src: u32, off: u32, len: u32) -> i32 {
    if (c_init_phase != 0u) { return RV_ERR_NOT_ALLOWED; }
    if (c_reply_staged != 0u || c_reply_forwarded != 0u) { return RV_ERR_LIMIT; }
    if (len > rv_max_payload()) { return RV_ERR_PAYLOAD_TOO_LARGE; }
    if ((m_flags() & RV_FLAG_NO_REPLY) != 0u) { return RV_OK; }
    var bulk_end = 0u;
    if (len > RV_PAYLOAD_BYTES) {
        let ar = ar_at(c_slot);
        let tail = l32(ar + O_actor_record_outbox_bulk_tail);
        let head = cbf(c_slot, O_control_block_outbox_bulk_head);
        bulk_end = rv_bulk_reserve(g_bulk, tail, head, len);
        if (bulk_end == tail) { return RV_ERR_OUTBOX_FULL; }
        let start = (bulk_end - len) & (g_bulk - 1u);
        copy_to_bulk(true, g_outbox_bulk + c_slot * g_bulk + start, src, off, len);
    }
    c_reply[1] = c_slot;
    c_reply[2] = RV_HOST_ENDPOINT;
    c_reply[3] = c_generation;
    c_reply[4] = m_env[4];
    c_reply[5] = m_env[5];
    c_reply[6] = c_hlc.x;
    c_reply[7] = c_hlc.y;
    for (var i = U.zero; i < PAYLOAD_WORDS; i = i + 1u) { c_reply[PAYLOAD_WORD + i] = 0u; }
    if (len > RV_PAYLOAD_BYTES) {
        c_reply[0] = env_word0(kind, RV_FLAG_BULK, SZ_bulk_ref);
        c_reply[PAYLOAD_WORD] = bulk_end;
        c_reply[PAYLOAD_WORD + 1u] = len;
        c_reply_bulk = 1u;
        c_reply_bulk_end = bulk_end;
    } else {
        c_reply[0] = env_word0(kind, 0u, len);
        for (var i = 0u; 4u * i < len; i = i + 1u) { c_reply[PAYLOAD_WORD + i] = src_word_masked(src, off, i, len); }
    }
    c_reply_staged = 1u;
    return RV_OK;
}

// ---- the behaviour API (what behaviours call) ----------------------------------------------------------------
fn rv_self() -> u32 { return c_slot; }
fn rv_generation() -> u32 { return c_generation; }
fn rv_clock_ns() -> vec2<u32> { return rv_grid_now(); }
fn rv_monotonic_ns() -> vec2<u32> { return rv_now_monotonic(); }
fn rv_state_bytes() -> u32 { return g_state_bytes; }
fn rv_msg_kind() -> u32 { return m_kind(); }
// The payload's 32-bit word at byte `at` (4-aligned), and its 64-bit value at `at`; zero past the payload.
fn rv_payload_u32(at: u32) -> u32 {
    if (at + 4u > rv_payload_len()) { return 0u; }
    return src_word(m_payload_src_checked(), m_payload_off(at), 0u);
}
fn rv_payload_u64(at: u32) -> vec2<u32> { return vec2<u32>(rv_payload_u32(at), rv_payload_u32(at + 4u)); }
// The state region's 32-bit word at byte `at` (4-aligned), and 64-bit values.
fn rv_state_u32(at: u32) -> u32 { return l32(state_at(c_slot) + at); }
fn rv_state_set_u32(at: u32, v: u32) { l32w(state_at(c_slot) + at, v); }
fn rv_state_u64(at: u32) -> vec2<u32> { return l64(state_at(c_slot) + at); }
fn rv_state_set_u64(at: u32, v: vec2<u32>) { l64w(state_at(c_slot) + at, v); }
// The reply scratch: rv_out_set_u32(at, v) writes its word at byte `at`; rv_reply(len) sends its first len bytes.
fn rv_out_set_u32(at: u32, v: u32) { rv_out[min(at / 4u, RV_OUT_WORDS - 1u)] = v; }
fn rv_out_set_u64(at: u32, v: vec2<u32>) { rv_out_set_u32(at, v.x); rv_out_set_u32(at + 4u, v.y); }
fn rv_reply(len: u32) -> i32 {
    if (len > RV_PAYLOAD_BYTES) { return RV_ERR_PAYLOAD_TOO_LARGE; }
    return rv_stage_reply(RV_KIND_REPLY, SRC_OUT, 0u, len);
}
// Replies with the message's own payload from byte `skip` on (any size).
fn rv_reply_payload(skip: u32) -> i32 {
    let n = rv_payload_len();
    if (skip > n || skip % 4u != 0u) { return RV_ERR_BAD_ENVELOPE; }
    return rv_stage_reply(RV_KIND_REPLY, m_payload_src_checked(), m_payload_off(skip), n - skip);
}
fn rv_reply_error(code: i32, detail: u32) -> i32 {
    let keep0 = rv_out[0];
    let keep1 = rv_out[1];
    rv_out[0] = bitcast<u32>(code);
    rv_out[1] = detail;
    let rc = rv_stage_reply(RV_KIND_ERROR, SRC_OUT, 0u, SZ_error_payload);
    rv_out[0] = keep0;
    rv_out[1] = keep1;
    return rc;
}

fn rv_k2k_seq_pos(seq: u32) -> u32 { return seq & 0x7FFFFFFFu; }
// A sequence number as published in this dispatch.
fn rv_k2k_seq_now(pos: u32) -> u32 { return (pos & 0x7FFFFFFFu) | (g_parity << 31u); }
// The signed distance seq - pos in 31-bit arithmetic.
fn rv_k2k_dif(seq: u32, pos: u32) -> i32 { return bitcast<i32>(((seq - pos) & 0x7FFFFFFFu) << 1u) >> 1u; }
// The cell at the consumer's position `khead` holds a message published before this dispatch (block 0, which
// runs in a dispatch of its own, takes any published cell).
fn rv_k2k_ready(cell: u32, khead: u32, any_parity: bool) -> bool {
    let seq = l32(cell + O_k2k_cell_seq);
    if (rv_k2k_seq_pos(seq) != ((khead + 1u) & 0x7FFFFFFFu)) { return false; }
    return any_parity || (seq >> 31u) != g_parity;
}

// The routed address of the actor in `slot` of device `device` of the host's runtime (rv_address in the C code).
fn rv_address(device: u32, slot: u32) -> u32 {
    if (device >= RV_MAX_ROUTED_DEVICES || slot > RV_ROUTED_SLOT_MASK) { return RV_HOST_ENDPOINT; }
    return RV_ROUTED_BIT | (device << RV_ROUTED_DEVICE_SHIFT) | slot;
}

// A send to a routed address: written to this slot's outbox past its tail, published by rv_finish_message; one
// outbox cell stays free for the message's reply. Inline payloads only (rv_stage_routed in the C code).
fn rv_stage_routed(dst: u32, src: u32, off: u32, len: u32, flags: u32) -> i32 {
    if ((dst >> RV_ROUTED_DEVICE_SHIFT) - (RV_ROUTED_BIT >> RV_ROUTED_DEVICE_SHIFT) >= RV_MAX_ROUTED_DEVICES) {
        return RV_ERR_SLOT_RANGE;
    }
    if (len > RV_PAYLOAD_BYTES) { return RV_ERR_PAYLOAD_TOO_LARGE; }
    if (c_send_count + c_routed_count >= RV_MAX_SENDS_PER_MESSAGE) { return RV_ERR_LIMIT; }
    if (g_outbox_cap < 2u) { return RV_ERR_LIMIT; }
    let cb = cb_at(c_slot);
    let tail = s32(cb + O_control_block_outbox_tail) + c_routed_count;
    if (tail - s32(cb + O_control_block_outbox_head) + 2u > g_outbox_cap) { return RV_ERR_K2K_FULL; }
    let e = outbox_cell(c_slot, tail);
    s32w(e, env_word0(RV_KIND_K2K, flags, len));
    s32w(e + 4u, c_slot);
    s32w(e + 8u, dst);
    s32w(e + 12u, c_generation);
    s32w(e + 16u, m_env[4]);
    s32w(e + 20u, m_env[5]);
    s32w(e + 24u, c_hlc.x);
    s32w(e + 28u, c_hlc.y);
    for (var i = U.zero; i < PAYLOAD_WORDS; i = i + 1u) {
        var w = 0u;
        if (4u * i < len) { w = src_word_masked(src, off, i, len); }
        s32w(e + O_envelope_payload + 4u * i, w);
    }
    c_routed_count = c_routed_count + 1u;
    return RV_OK;
}

fn rv_stage_send(dst: u32, src: u32, off: u32, len: u32, flags: u32) -> i32 {
    if (c_init_phase != 0u) { return RV_ERR_NOT_ALLOWED; }
    if ((dst & RV_ROUTED_BIT) != 0u) { return rv_stage_routed(dst, src, off, len, flags); }
    if (dst >= g_slots) { return RV_ERR_SLOT_RANGE; }
    if (len > rv_max_payload()) { return RV_ERR_PAYLOAD_TOO_LARGE; }
    if (c_send_count + c_routed_count >= RV_MAX_SENDS_PER_MESSAGE) { return RV_ERR_LIMIT; }
    let target_state = cbf(dst, O_control_block_state);
    if (target_state != RV_STATE_ACTIVE && target_state != RV_STATE_DRAINING) { return RV_ERR_TARGET_GONE; }
    let km = km_at(dst);
    let bulk = len > RV_PAYLOAD_BYTES;
    var bulk_end = 0u;
    if (bulk) {
        if (atomicCompareExchangeWeak(&L[(km + O_k2k_meta_bulk_lock) >> 2u], 0u, 1u).old_value != 0u) {
            return RV_ERR_K2K_FULL; // a spurious failure of the weak exchange is "full for now" too
        }
        let tail = l32(km + O_k2k_meta_bulk_tail);
        bulk_end = rv_bulk_reserve(g_bulk, tail, l32(km + O_k2k_meta_bulk_head), len);
        if (bulk_end == tail) {
            l32w(km + O_k2k_meta_bulk_lock, 0u);
            return RV_ERR_K2K_FULL;
        }
    }
    var pos = l32(km + O_k2k_meta_tail);
    var cell = 0u;
    var reserved = false;
    for (var tries = 0u; tries < 64u; tries = tries + 1u) {
        cell = kcell_at(dst, pos);
        let dif = rv_k2k_dif(l32(cell + O_k2k_cell_seq), pos);
        if (dif == 0) {
            let r = atomicCompareExchangeWeak(&L[(km + O_k2k_meta_tail) >> 2u], pos, pos + 1u);
            if (r.exchanged) { reserved = true; break; }
            pos = r.old_value;
        } else if (dif < 0) {
            break;
        } else {
            pos = l32(km + O_k2k_meta_tail);
        }
    }
    if (!reserved) {
        if (bulk) { l32w(km + O_k2k_meta_bulk_lock, 0u); }
        return RV_ERR_K2K_FULL;
    }
    if (bulk) {
        l32w(km + O_k2k_meta_bulk_tail, bulk_end);
        l32w(km + O_k2k_meta_bulk_lock, 0u);
    }
    let e = cell + O_k2k_cell_env;
    l32w(e + 4u, c_slot);
    l32w(e + 8u, dst);
    l32w(e + 12u, c_generation);
    l32w(e + 16u, m_env[4]);
    l32w(e + 20u, m_env[5]);
    l64w(e + 24u, c_hlc);
    if (bulk) {
        let start = (bulk_end - len) & (g_bulk - 1u);
        copy_to_bulk(false, g_k2k_bulk + dst * g_bulk + start, src, off, len);
        l32w(e, env_word0(RV_KIND_K2K, flags | RV_FLAG_BULK, SZ_bulk_ref));
        l32w(e + O_envelope_payload, bulk_end);
        l32w(e + O_envelope_payload + 4u, len);
    } else {
        l32w(e, env_word0(RV_KIND_K2K, flags, len));
        for (var i = U.zero; i < PAYLOAD_WORDS; i = i + 1u) {
            var w = 0u;
            if (4u * i < len) { w = src_word_masked(src, off, i, len); }
            l32w(e + O_envelope_payload + 4u * i, w);
        }
    }
    c_send_cells[c_send_count] = cell;
    c_send_pos[c_send_count] = pos;
    c_send_dst[c_send_count] = dst;
    c_send_count = c_send_count + 1u;
    return RV_OK;
}

// A notification to another actor: the first `len` bytes of the scratch.
fn rv_send(dst: u32, len: u32) -> i32 {
    if (len > RV_PAYLOAD_BYTES) { return RV_ERR_PAYLOAD_TOO_LARGE; }
    return rv_stage_send(dst, SRC_OUT, 0u, len, RV_FLAG_NO_REPLY);
}
// Hands the duty to answer to `dst`, with the message's payload from byte `skip` on.
fn rv_forward_payload(dst: u32, skip: u32) -> i32 {
    if (c_reply_staged != 0u || c_reply_forwarded != 0u) { return RV_ERR_LIMIT; }
    let n = rv_payload_len();
    if (skip > n || skip % 4u != 0u) { return RV_ERR_BAD_ENVELOPE; }
    let rc = rv_stage_send(dst, m_payload_src_checked(), m_payload_off(skip), n - skip, m_flags() & RV_FLAG_NO_REPLY);
    if (rc == RV_OK) { c_reply_forwarded = 1u; }
    return rc;
}

fn rv_stall_for(ns: vec2<u32>) {
    if (c_init_phase != 0u) { return; }
    s64w(cb_at(c_slot) + O_control_block_stall_until_ns, u64_add(rv_grid_now(), ns));
}

// As the C protocol's: everything of rv_finish_message but the outbox tail's store; returns the tail to publish.
fn rv_stage_publication(ok: bool) -> u32 {
    for (var i = 0u; i < c_send_count; i = i + 1u) {
        let cell = c_send_cells[i];
        if (!ok) {
            let e = cell + O_k2k_cell_env;
            l32w(e, (l32(e) & ~0xFFu) | RV_KIND_VOID);
        }
        l32w(cell + O_k2k_cell_seq, rv_k2k_seq_now(c_send_pos[i] + 1u));
    }
    let cb = cb_at(c_slot);
    if (ok) {
        s32w(cb + O_control_block_k2k_sent, s32(cb + O_control_block_k2k_sent) + c_send_count + c_routed_count);
    }
    // the routed sends lie in the outbox from its tail on; the reply goes after them
    let tail = s32(cb + O_control_block_outbox_tail);
    var publish = tail;
    if (ok) { publish = tail + c_routed_count; }
    c_send_count = 0u;
    c_routed_count = 0u;
    c_reply_forwarded = 0u;
    if (c_reply_staged != 0u) {
        if (ok) {
            store_reply_to_s(outbox_cell(c_slot, publish));
            if (c_reply_bulk != 0u) { l32w(ar_at(c_slot) + O_actor_record_outbox_bulk_tail, c_reply_bulk_end); }
            publish = publish + 1u;
        }
        c_reply_staged = 0u;
        c_reply_bulk = 0u;
    }
    return publish;
}

fn rv_finish_message(ok: bool) -> u32 {
    let cb = cb_at(c_slot);
    let tail = s32(cb + O_control_block_outbox_tail);
    let publish = rv_stage_publication(ok);
    if (publish == tail) { return 0u; }
    s32w(cb + O_control_block_outbox_tail, publish);
    return RV_STEP_REPLIED;
}

// As the C protocol's: the message is consumed (the inbox head moves to `head`), then what it staged is published.
// C writes both words with one 64-bit release store when it can; WGSL's shared region is device memory the host
// reads after the dispatch, so the two stores in sequence cost nothing more here.
fn rv_consume_and_finish(head: u32) -> u32 {
    s32w(cb_at(c_slot) + O_control_block_inbox_head, head);
    return rv_finish_message(true);
}


// and its words, as the C built-ins read msg->payload_len and msg->payload.
fn rv_msg_len() -> u32 { return m_len(); }
fn rv_msg_u32(at: u32) -> u32 {
    if (at + 4u > RV_PAYLOAD_BYTES) { return 0u; }
    return m_env[PAYLOAD_WORD + at / 4u];
}
fn rv_msg_u64(at: u32) -> vec2<u32> { return vec2<u32>(rv_msg_u32(at), rv_msg_u32(at + 4u)); }
