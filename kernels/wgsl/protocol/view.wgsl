// protocol/view.wgsl - the view (where each area starts), envelopes as private copies, addressing and bulk areas.
//
// Part of the WGSL port of the device protocol (read wgsl/rv_protocol.wgsl for the differences WebGPU forces);
// the twin of kernels/protocol/view.cu (device/tests/protocol_mirror.rs keeps them in step).

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
var<private> g_keepers: u32;
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
    g_keepers = s32(O_grid_header_off_keeper_records);
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
fn keeper_at(slot: u32) -> u32 { return g_keepers + slot * SZ_keeper_record; }
fn ar_at(slot: u32) -> u32 { return g_actors + slot * SZ_actor_record; }
fn km_at(slot: u32) -> u32 { return g_k2k_meta + slot * SZ_k2k_meta; }
fn kcell_at(slot: u32, index: u32) -> u32 {
    return g_k2k_cells + (slot * g_k2k_cap + (index & (g_k2k_cap - 1u))) * SZ_k2k_cell;
}
fn state_at(slot: u32) -> u32 { return g_state + slot * g_state_bytes; }

// A control-block field of a slot.
fn cbf(slot: u32, field: u32) -> u32 { return s32(cb_at(slot) + field); }

fn rv_grid_now() -> vec2<u32> { return rv_now(); }
// The C side's clock at a few milliseconds' resolution: the dispatch's time is that already.
fn rv_grid_coarse() -> vec2<u32> { return rv_now(); }

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
