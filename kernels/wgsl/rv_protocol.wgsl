// rv_protocol.wgsl - the device protocol in WGSL: block 0's supervisor step and the actors' step, ported from
// (Over 600 lines: split together with rv_protocol.cu along the same seams, issue 34; see its header.)
// kernels/rv_protocol.cu (the reference: same state machine, same validation, same events; read the comments
// there for the why of each step). Differences, all forced by WebGPU:
//   - regions are arrays of atomic words addressed by byte offsets (rv_port.wgsl); the offsets of the areas are
//     read from the grid header into private variables once per invocation (rv_view_load);
//   - behaviours see the current message as a private copy (m_env) and the reply is staged in a private copy
//     (c_reply): WGSL has no pointers into arbitrary memory;
//   - kernel-to-kernel cells carry the parity of the dispatch that published them in bit 31 of their sequence
//     number (positions are compared in 31 bits), and a consumer takes a cell only if it was published in an
//     earlier dispatch: the dispatch boundary is the only fence between workgroups (rv_k2k_ready);
//   - block 0 and the actors run in separate dispatches, so block 0 never races an actor step.

// ---- the view: where each area starts (byte offsets into S or L) ---------------------------------------------
var<private> g_slots: u32;
var<private> g_inbox_cap: u32;
var<private> g_outbox_cap: u32;
var<private> g_k2k_cap: u32;
var<private> g_cmd_cap: u32;
var<private> g_evt_cap: u32;
var<private> g_state_bytes: u32;
var<private> g_bulk: u32;
var<private> g_blocks: u32;
var<private> g_commands: u32;
var<private> g_events: u32;
var<private> g_inboxes: u32;
var<private> g_outboxes: u32;
var<private> g_inbox_bulk: u32;
var<private> g_outbox_bulk: u32;
var<private> g_sv: u32;
var<private> g_actors: u32;
var<private> g_attention: u32;
var<private> g_k2k_meta: u32;
var<private> g_k2k_cells: u32;
var<private> g_state: u32;
var<private> g_k2k_bulk: u32;
// The parity of this dispatch: R[0] counts block 0's dispatches, and one runs between any two actor dispatches.
var<private> g_parity: u32;

// The executor checked that both regions fit in 32-bit offsets before it started (the high words are zero).
fn rv_view_load() {
    g_slots = s32(O_grid_header_slot_count);
    g_inbox_cap = s32(O_grid_header_inbox_capacity);
    g_outbox_cap = s32(O_grid_header_outbox_capacity);
    g_k2k_cap = s32(O_grid_header_k2k_capacity);
    g_cmd_cap = s32(O_grid_header_command_capacity);
    g_evt_cap = s32(O_grid_header_event_capacity);
    g_state_bytes = s32(O_grid_header_state_bytes);
    g_bulk = s32(O_grid_header_bulk_bytes);
    g_blocks = s32(O_grid_header_off_blocks);
    g_commands = s32(O_grid_header_off_commands);
    g_events = s32(O_grid_header_off_events);
    g_inboxes = s32(O_grid_header_off_inboxes);
    g_outboxes = s32(O_grid_header_off_outboxes);
    g_inbox_bulk = s32(O_grid_header_off_inbox_bulk);
    g_outbox_bulk = s32(O_grid_header_off_outbox_bulk);
    g_sv = s32(O_grid_header_off_sv_records);
    g_actors = s32(O_grid_header_off_actor_records);
    g_attention = s32(O_grid_header_off_attention);
    g_k2k_meta = s32(O_grid_header_off_k2k_meta);
    g_k2k_cells = s32(O_grid_header_off_k2k_cells);
    g_state = s32(O_grid_header_off_state);
    g_k2k_bulk = s32(O_grid_header_off_k2k_bulk);
}

fn cb_at(slot: u32) -> u32 { return g_blocks + slot * SZ_control_block; }
fn inbox_cell(slot: u32, index: u32) -> u32 {
    return g_inboxes + (slot * g_inbox_cap + (index & (g_inbox_cap - 1u))) * SZ_envelope;
}
fn outbox_cell(slot: u32, index: u32) -> u32 {
    return g_outboxes + (slot * g_outbox_cap + (index & (g_outbox_cap - 1u))) * SZ_envelope;
}
fn sv_at(slot: u32) -> u32 { return g_sv + slot * SZ_sv_record; }
fn ar_at(slot: u32) -> u32 { return g_actors + slot * SZ_actor_record; }
fn km_at(slot: u32) -> u32 { return g_k2k_meta + slot * SZ_k2k_meta; }
fn kcell_at(slot: u32, index: u32) -> u32 {
    return g_k2k_cells + (slot * g_k2k_cap + (index & (g_k2k_cap - 1u))) * SZ_k2k_cell;
}
fn state_at(slot: u32) -> u32 { return g_state + slot * g_state_bytes; }

// A control-block field of a slot.
fn cbf(slot: u32, field: u32) -> u32 { return s32(cb_at(slot) + field); }

fn rv_grid_now() -> vec2<u32> { return rv_now(); }

fn rv_hlc_next(local: vec2<u32>, remote: vec2<u32>) -> vec2<u32> {
    let physical = u64_shl(U.now_ms, 16u);
    let logical = u64_inc(u64_max(local, remote));
    return u64_max(physical, logical);
}

// The attention bitmap (a bit per slot), then its summary (a bit per word), as rv_protocol.cu lays them out:
// the slot's bit first, then its word's summary bit.
fn rv_attention_words() -> u32 {
    return (g_slots + 31u) / 32u;
}

fn rv_raise_attention(slot: u32) {
    let word = slot >> 5u;
    atomicOr(&L[(g_attention >> 2u) + word], 1u << (slot & 31u));
    atomicOr(&L[(g_attention >> 2u) + rv_attention_words() + (word >> 5u)], 1u << (word & 31u));
}

// ---- envelopes (private copies) ------------------------------------------------------------------------------
// The current message (a copy of the inbox cell, the kernel-to-kernel cell's envelope, or the init envelope) and
// the reply being staged.
var<private> m_env: array<u32, ENV_WORDS>;
var<private> c_reply: array<u32, ENV_WORDS>;
var<private> t_env: array<u32, ENV_WORDS>; // scratch: error replies of block 0, events, commands

fn env_kind(w0: u32) -> u32 { return w0 & 0xFFu; }
fn env_flags(w0: u32) -> u32 { return (w0 >> 8u) & 0xFFu; }
fn env_len(w0: u32) -> u32 { return w0 >> 16u; }
fn env_word0(kind: u32, flags: u32, len: u32) -> u32 { return (kind & 0xFFu) | ((flags & 0xFFu) << 8u) | (len << 16u); }

fn m_kind() -> u32 { return env_kind(m_env[0]); }
fn m_flags() -> u32 { return env_flags(m_env[0]); }
fn m_len() -> u32 { return env_len(m_env[0]); }

fn load_msg_from_s(off: u32) { for (var i = U.zero; i < ENV_WORDS; i = i + 1u) { m_env[i] = s32(off + 4u * i); } }
fn load_msg_from_l(off: u32) { for (var i = U.zero; i < ENV_WORDS; i = i + 1u) { m_env[i] = l32(off + 4u * i); } }
fn store_reply_to_s(off: u32) { for (var i = U.zero; i < ENV_WORDS; i = i + 1u) { s32w(off + 4u * i, c_reply[i]); } }
fn store_t_to_s(off: u32, words: u32) { for (var i = U.zero; i < words; i = i + 1u) { s32w(off + 4u * i, t_env[i]); } }
fn clear_t() { for (var i = U.zero; i < ENV_WORDS; i = i + 1u) { t_env[i] = 0u; } }

// ---- bulk areas -----------------------------------------------------------------------------------------------
// Where a bulk envelope's bytes lie within `slot`'s area starting at `areas`, or RV_NO_INDEX when the reference
// is malformed or names anything outside that area.
fn rv_bulk_at(areas: u32, slot: u32, w0: u32, p0: u32, p1: u32) -> u32 {
    let size = g_bulk;
    if (size == 0u || (env_flags(w0) & RV_FLAG_BULK) == 0u || env_len(w0) != SZ_bulk_ref) { return RV_NO_INDEX; }
    let end = p0;
    let len = p1;
    let start = (end - len) & (size - 1u);
    if (len > size || start + len > size) { return RV_NO_INDEX; }
    return areas + slot * size + start;
}

fn rv_bulk_reserve(size: u32, tail: u32, head: u32, len: u32) -> u32 {
    var start = (tail + 15u) & ~15u;
    if ((start & (size - 1u)) + len > size) { start = (start + size - 1u) & ~(size - 1u); }
    let end = start + len;
    if (end - head > size && head != tail) { return tail; }
    return end;
}

// Sources of bytes a reply or a send copies: the behaviour's scratch (rv_out), the shared region, the local
// region, the current message's inline payload.
const SRC_OUT: u32 = 0u;
const SRC_S: u32 = 1u;
const SRC_L: u32 = 2u;
const SRC_MSG: u32 = 3u;
const RV_OUT_WORDS: u32 = PAYLOAD_WORDS;
var<private> rv_out: array<u32, RV_OUT_WORDS>;

fn src_word(src: u32, off: u32, i: u32) -> u32 {
    switch (src) {
        case 0u: { return rv_out[min(off / 4u + i, RV_OUT_WORDS - 1u)]; }
        case 1u: { return s32(off + 4u * i); }
        case 2u: { return l32(off + 4u * i); }
        default: { return m_env[min(PAYLOAD_WORD + off / 4u + i, ENV_WORDS - 1u)]; }
    }
}

// The word `i` of `len` bytes from a source, bytes past `len` zero.
fn src_word_masked(src: u32, off: u32, i: u32, len: u32) -> u32 {
    let w = src_word(src, off, i);
    let have = len - 4u * i;
    if (have >= 4u) { return w; }
    return w & ((1u << (have * 8u)) - 1u);
}

// Copies `len` bytes to a 16-byte aligned bulk reservation in S (to_s) or L, padded with zeros to 16 bytes.
fn copy_to_bulk(to_s: bool, dst: u32, src: u32, off: u32, len: u32) {
    let words = ((len + 15u) / 16u) * 4u;
    for (var i = U.zero; i < words; i = i + 1u) {
        var w = 0u;
        if (4u * i < len) { w = src_word_masked(src, off, i, len); }
        if (to_s) { s32w(dst + 4u * i, w); } else { l32w(dst + 4u * i, w); }
    }
}

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

fn rv_finish_message(ok: bool) -> u32 {
    var out = 0u;
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
    if (publish != tail) {
        s32w(cb + O_control_block_outbox_tail, publish);
        out = out | RV_STEP_REPLIED;
    }
    return out;
}

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
        let now = rv_grid_now();
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
    return rv_actor_idle(slot, s32(cb_at(slot) + O_control_block_host_seq), l32(sv_at(slot) + O_sv_record_device_seq));
}

// The step of a slot the scan found not idle (rv_actor_step in the C code, after its idle check).
fn rv_actor_step(slot: u32, budget: u32) -> u32 {
    if (slot >= g_slots) { return 0u; }
    let cb = cb_at(slot);
    let ar = ar_at(slot);
    let host_seq = s32(cb + O_control_block_host_seq);
    let device_seq = l32(sv_at(slot) + O_sv_record_device_seq);
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
            out = out | rv_finish_message(true);
            head = head + 1u;
            s32w(cb + O_control_block_inbox_head, head);
            done = done + 1u;
            continue;
        }
        if (m_kind() == RV_KIND_STATE) {
            let len = rv_state_read_len();
            let rc = rv_stage_reply(RV_KIND_REPLY, SRC_L, state_at(slot), len);
            if (rc == RV_ERR_OUTBOX_FULL) { break; }
            if (rc != RV_OK) { rv_reply_error(rc, len); }
            head = head + 1u;
            s32w(cb + O_control_block_inbox_head, head);
            out = out | rv_finish_message(true);
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
        s32w(cb + O_control_block_inbox_head, head);
        out = out | rv_finish_message(true);
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
        l64w(ar + O_actor_record_next_beat_ns, u64_add(rv_grid_now(), u64_of(RV_IDLE_BEAT_NS)));
    }
    return out;
}

// On the actor's workgroup: the behaviour's init for a creation block 0 prepared.
fn rv_actor_init(slot: u32) -> u32 {
    let cb = cb_at(slot);
    let rec = sv_at(slot);
    if (l32(rec + O_sv_record_pending_op) != RV_OP_INIT) { return 0u; }
    let cmd = rec + O_sv_record_pending;
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
    l32w(rec + O_sv_record_init_result, bitcast<u32>(rc));
    if (rc == RV_OK) {
        s32w(cb + O_control_block_state, RV_STATE_ACTIVE);
    } else {
        s32w(cb + O_control_block_last_error, bitcast<u32>(rc));
        s32w(cb + O_control_block_state, RV_STATE_FAILED);
    }
    rv_raise_attention(slot);
    return RV_STEP_PROGRESS | RV_STEP_ATTENTION;
}

// ---- block 0: the device supervisor ----------------------------------------------------------------------------
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
fn rv_sv_create(success_kind: u32) {
    let slot = k(O_command_slot);
    let cb = cb_at(slot);
    let rec = sv_at(slot);
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
    store_cmd_to_l(rec + O_sv_record_pending);
    store_cmd_to_l(rec + O_sv_record_start);
    l32w(rec + O_sv_record_init_event, success_kind);
    l32w(rec + O_sv_record_init_old_head, old_head);
    l32w(rec + O_sv_record_init_old_failed, old_failed);
    l32w(rec + O_sv_record_init_dropped, dropped);
    l64w(rec + O_sv_record_init_old_processed, old_processed);
    l32w(rec + O_sv_record_pending_op, RV_OP_INIT);
}

// By the init's own result (rv_protocol.cu's rv_sv_init_done): a failure of the new incarnation is reported next.
fn rv_sv_init_done(slot: u32) {
    let rec = sv_at(slot);
    l32w(rec + O_sv_record_pending_op, RV_OP_NONE);
    let code = bitcast<i32>(l32(rec + O_sv_record_init_result));
    var kind = RV_EVT_CREATE_FAILED;
    var reported = RV_STATE_FAILED;
    if (code == RV_OK) {
        kind = l32(rec + O_sv_record_init_event);
        reported = RV_STATE_ACTIVE;
    }
    l32w(rec + O_sv_record_reported_state, reported);
    load_cmd_from_l(rec + O_sv_record_pending);
    rv_publish_processed(kind, slot, true, code, l32(rec + O_sv_record_init_old_head),
                         l32(rec + O_sv_record_init_old_failed), l32(rec + O_sv_record_init_dropped),
                         l64(rec + O_sv_record_init_old_processed));
}

fn rv_sv_request(op: u32) {
    let slot = k(O_command_slot);
    let cb = cb_at(slot);
    let rec = sv_at(slot);
    l32w(rec + O_sv_record_pending_op, k(O_command_op));
    store_cmd_to_l(rec + O_sv_record_pending);
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

fn rv_sv_execute() {
    let slot = k(O_command_slot);
    let op = k(O_command_op);
    if (slot >= g_slots) { rv_reject(RV_ERR_SLOT_RANGE); return; }
    if (op < RV_OP_CREATE || op > RV_OP_RESUME) { rv_reject(RV_ERR_BAD_COMMAND); return; }
    let cb = cb_at(slot);
    let rec = sv_at(slot);
    if (l32(rec + O_sv_record_pending_op) != RV_OP_NONE) { rv_reject(RV_ERR_BUSY); return; }
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
            rv_sv_create(RV_EVT_CREATED);
        }
        case RV_OP_RESTART: {
            if (state == RV_STATE_DORMANT || state == RV_STATE_INITIALIZING) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            let rc = rv_init_valid();
            if (rc != RV_OK) { rv_reject(rc); return; }
            if (!rv_index_near(k(O_command_inbox_index), head)) { rv_reject(RV_ERR_BAD_COMMAND); return; }
            if (running) { rv_sv_request(RV_OP_KILL); return; }
            rv_sv_create(RV_EVT_RESTARTED);
        }
        case RV_OP_KILL: {
            if (running) { rv_sv_request(RV_OP_KILL); return; }
            if (state != RV_STATE_FAILED) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            s32w(cb + O_control_block_state, RV_STATE_TERMINATED);
            l32w(rec + O_sv_record_reported_state, RV_STATE_TERMINATED);
            let dropped = rv_reclaim_k2k(slot);
            rv_publish(RV_EVT_KILLED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)), head,
                       s32(cb + O_control_block_failed_index), dropped);
        }
        case RV_OP_DRAIN: {
            if (state != RV_STATE_ACTIVE) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            if (k(O_command_inbox_index) - head > g_inbox_cap) { rv_reject(RV_ERR_BAD_COMMAND); return; }
            rv_sv_request(RV_OP_DRAIN);
        }
        default: {
            if (state != RV_STATE_DRAINING) { rv_reject(RV_ERR_ILLEGAL_TRANSITION); return; }
            rv_sv_request(RV_OP_RESUME);
        }
    }
}

fn rv_touch_slot(slot: u32) {
    let rec = sv_at(slot);
    l32w(rec + O_sv_record_device_seq, l32(rec + O_sv_record_device_seq) + 1u);
}

fn rv_restart_granted(slot: u32) -> bool {
    let cb = cb_at(slot);
    return l32(sv_at(slot) + O_sv_record_start + O_command_op) != RV_OP_NONE &&
           s32(cb + O_control_block_restart_grant) == s32(cb + O_control_block_generation) &&
           rv_index_near(s32(cb + O_control_block_inbox_tail), s32(cb + O_control_block_inbox_head));
}

// `tail`: the host's inbox tail read before the Failed event was published (rv_protocol.cu's rv_sv_granted_restart).
fn rv_sv_granted_restart(slot: u32, tail: u32) {
    let cb = cb_at(slot);
    load_cmd_from_l(sv_at(slot) + O_sv_record_start);
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
    rv_sv_create(RV_EVT_RESTARTED);
}

fn rv_sv_attend(slot: u32) {
    let cb = cb_at(slot);
    let rec = sv_at(slot);
    var pending = l32(rec + O_sv_record_pending_op);
    if (pending == RV_OP_INIT) {
        if (s32(cb + O_control_block_state) == RV_STATE_INITIALIZING) { return; }
        rv_sv_init_done(slot); // then a failure of the new incarnation, below
        pending = RV_OP_NONE;
    }
    if (pending != RV_OP_NONE && s32(cb + O_control_block_request_ack) == s32(cb + O_control_block_request_seq)) {
        load_cmd_from_l(rec + O_sv_record_pending);
        let state = s32(cb + O_control_block_state);
        l32w(rec + O_sv_record_pending_op, RV_OP_NONE);
        if (pending == RV_OP_KILL) {
            l32w(rec + O_sv_record_reported_state, RV_STATE_TERMINATED);
            let dropped = rv_reclaim_k2k(slot);
            rv_publish(RV_EVT_KILLED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)),
                       s32(cb + O_control_block_inbox_head), s32(cb + O_control_block_failed_index), dropped);
        } else if (pending == RV_OP_RESTART) {
            rv_sv_create(RV_EVT_RESTARTED);
        } else if (pending == RV_OP_DRAIN && (state == RV_STATE_DRAINING || state == RV_STATE_TERMINATED)) {
            l32w(rec + O_sv_record_reported_state, RV_STATE_DRAINING);
            rv_publish(RV_EVT_DRAINING, slot, true, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, 0u);
        } else if (pending == RV_OP_RESUME && state == RV_STATE_ACTIVE) {
            l32w(rec + O_sv_record_reported_state, RV_STATE_ACTIVE);
            rv_publish(RV_EVT_RESUMED, slot, true, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, 0u);
        } else {
            rv_reject(RV_ERR_ILLEGAL_TRANSITION);
        }
    }
    let state = s32(cb + O_control_block_state);
    if (state == l32(rec + O_sv_record_reported_state) || l32(rec + O_sv_record_pending_op) != RV_OP_NONE) { return; }
    if (state == RV_STATE_FAILED) {
        let granted = rv_restart_granted(slot);
        let tail = s32(cb + O_control_block_inbox_tail); // before the event is out
        clear_cmd();
        k_set(O_command_op, select(RV_OP_NONE, RV_OP_RESTART, granted));
        rv_publish(RV_EVT_FAILED, slot, true, bitcast<i32>(s32(cb + O_control_block_last_error)),
                   s32(cb + O_control_block_inbox_head), s32(cb + O_control_block_failed_index), 0u);
        if (granted) { rv_sv_granted_restart(slot, tail); }
    } else if (state == RV_STATE_TERMINATED && l32(rec + O_sv_record_reported_state) == RV_STATE_DRAINING) {
        let dropped = rv_reclaim_k2k(slot);
        rv_publish(RV_EVT_DRAINED, slot, false, 0, s32(cb + O_control_block_inbox_head), RV_NO_INDEX, dropped);
    }
    l32w(rec + O_sv_record_reported_state, state);
}

const RV_EVENTS_PER_ATTEND: u32 = 3u;

// Commands block 0 executes per dispatch here (RV_COMMANDS_PER_STEP, 64, elsewhere too): one invocation runs them
// one after the other, so a long burst is spread over several dispatches instead of one long one (a GPU's
// watchdog bounds a dispatch). On lavapipe (Mesa 22.3), a dispatch that executed more than about 110 creates
// lost the supervisor records of a few of them (one in about 120; see docs/architecture.md, known limits).
const SV_COMMANDS_PER_DISPATCH: u32 = 64u;

fn rv_supervisor_step() -> u32 {
    var out = 0u;
    if (rv_device_faulted()) { return 0u; }
    s64w(O_grid_header_supervisor_heartbeat, u64_inc(s64(O_grid_header_supervisor_heartbeat)));
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
                rv_sv_attend(w * 32u + b);
                rv_touch_slot(w * 32u + b);
                s64w(O_grid_header_supervisor_heartbeat, u64_inc(s64(O_grid_header_supervisor_heartbeat)));
                out = out | RV_STEP_PROGRESS | RV_STEP_REPLIED;
            }
        }
    }
    for (var n = 0u; n < SV_COMMANDS_PER_DISPATCH; n = n + 1u) {
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
        rv_sv_execute();
        if (slot < g_slots) { rv_touch_slot(slot); }
        s32w(O_grid_header_command_head, head + 1u);
        s64w(O_grid_header_commands_processed, u64_inc(s64(O_grid_header_commands_processed)));
        s64w(O_grid_header_supervisor_heartbeat, u64_inc(s64(O_grid_header_supervisor_heartbeat)));
        out = out | RV_STEP_PROGRESS | RV_STEP_REPLIED;
    }
    return out;
}

// ---- entry points ------------------------------------------------------------------------------------------------
// Block 0: one workgroup of one invocation, in a dispatch of its own.
@compute @workgroup_size(1)
fn rv_supervisor_main() {
    rv_view_load();
    // A fresh work list for the actor dispatches that follow (an empty grid is x = 0).
    atomicStore(&W[0], 0u);
    atomicStore(&A[0], 0u);
    atomicStore(&A[1], 1u);
    atomicStore(&A[2], 1u);
    g_parity = (atomicAdd(&R[0], 1u) + 1u) & 1u;
    atomicOr(&R[1], rv_supervisor_step());
}

// The actors, in two dispatches. The scan: workgroup g checks slots [g * slots_per_group, (g + 1) *
// slots_per_group) and lists those that are not idle in W (W[0]: how many, W[1..]: the slots), growing the
// indirect dispatch arguments A (x, y, z) to cover them. The step: one workgroup per listed slot.
// Why two: a shader compiler that runs divergent branches with an execution mask (lavapipe does) pays for the
// whole step in every loop iteration that contains it, taken or not; the scan holds only the idle check, and the
// step runs once per slot with work.
@compute @workgroup_size(1)
fn rv_actor_scan_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    rv_view_load();
    let group = wg.x + wg.y * groups.x;
    let first = group * U.slots_per_group;
    let last = min(first + U.slots_per_group, g_slots);
    for (var slot = first; slot < last; slot = slot + 1u) {
        if (rv_slot_idle(slot)) { continue; }
        let i = atomicAdd(&W[0], 1u);
        atomicStore(&W[1u + i], slot);
        atomicMax(&A[0], min(i + 1u, U.max_groups_x));
        atomicMax(&A[1], i / U.max_groups_x + 1u);
    }
}

@compute @workgroup_size(1)
fn rv_actor_step_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    rv_view_load();
    g_parity = atomicLoad(&R[0]) & 1u;
    let i = wg.x + wg.y * groups.x;
    if (i >= atomicLoad(&W[0])) { return; }
    let slot = atomicLoad(&W[1u + i]);
    let r = rv_actor_step(slot, U.budget);
    if ((r & RV_STEP_REPLIED) != 0u) { atomicOr(&R[2u + (slot >> 5u)], 1u << (slot & 31u)); }
    if (r != 0u) { atomicOr(&R[1], r); }
}

// The envelope's own payload (at most RV_PAYLOAD_BYTES; a large message's is its bulk reference): its length
// and its words, as the C built-ins read msg->payload_len and msg->payload.
fn rv_msg_len() -> u32 { return m_len(); }
fn rv_msg_u32(at: u32) -> u32 {
    if (at + 4u > RV_PAYLOAD_BYTES) { return 0u; }
    return m_env[PAYLOAD_WORD + at / 4u];
}
fn rv_msg_u64(at: u32) -> vec2<u32> { return vec2<u32>(rv_msg_u32(at), rv_msg_u32(at + 4u)); }
