// rv_port.wgsl - the WGSL side's portability layer: the regions, word and byte access, 64-bit values as two
// 32-bit words, and the clock.
//
// The offsets and constants used below and in rv_protocol.wgsl come from the generated prelude (the C layout
// report, see device/src/backend/wgpu/program.rs): O_<struct>_<field> is a byte offset, W_<struct>_<field> a
// field's size in bytes, SZ_<struct> a struct's size, RV_* the protocol constants. Nothing here restates a
// layout: a C change shows up as a different prelude, and the const_asserts below refuse a field whose width
// the WGSL access no longer matches.
//
// WebGPU facts this code lives with: no 64-bit integers (a u64 is vec2<u32>(lo, hi)); no 8/16-bit storage (bytes
// are packed in words); storage atomics are 32-bit and relaxed; and no ordering between workgroups inside one
// dispatch. So every region is an array of atomic words, and nothing a workgroup publishes in a dispatch is
// consumed by another workgroup in the same dispatch (the dispatch boundary is the fence; see the k2k parity
// rule in rv_protocol.wgsl).

// The shared region (the host's mirror: uploaded before, read back after each submit), the local region (device
// memory only), the executor's per-submit parameters, the step words (word 0: block 0's dispatches so far;
// word 1: the OR of every step's result in this submit; words 2..: a bit per slot that published replies), the
// work list (word 0: how many slots, words 1..: the slots with work, written by the scan) and, in a group of its
// own because the step dispatch reads it as its indirect arguments, the step dispatch's grid (x, y, z).
@group(0) @binding(0) var<storage, read_write> S: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read_write> L: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> U: rv_submit_params;
@group(0) @binding(3) var<storage, read_write> R: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> W: array<atomic<u32>>;
@group(1) @binding(0) var<storage, read_write> A: array<atomic<u32>>;

struct rv_submit_params {
    now: vec2<u32>,       // host time (CLOCK_REALTIME ns) when the submit was built
    now_ms: vec2<u32>,    // the same in milliseconds (the hybrid logical clock's physical part)
    monotonic: vec2<u32>, // CLOCK_MONOTONIC ns
    slots_per_group: u32,
    budget: u32,
    // Always 0. Loops over fixed-size records start from it: a trip count the shader compiler cannot know keeps
    // it from unrolling them at every inlined call site (on lavapipe that made compiling the program take seconds).
    zero: u32,
    max_groups_x: u32, // the most workgroups a dispatch's x dimension takes
    pad1: u32,
    pad2: u32,
}

// ---- the widths the accesses below assume ------------------------------------------------------------------
const_assert O_envelope_kind == 0u && W_envelope_kind == 1u;
const_assert O_envelope_flags == 1u && W_envelope_flags == 1u;
const_assert O_envelope_payload_len == 2u && W_envelope_payload_len == 2u;
const_assert O_envelope_payload % 4u == 0u && W_envelope_payload == RV_PAYLOAD_BYTES;
const_assert SZ_envelope % 16u == 0u && SZ_command % 16u == 0u && SZ_event % 16u == 0u;
const_assert W_envelope_correlation == 8u && W_envelope_hlc == 8u;
const_assert W_command_cmd_id == 8u && W_command_init == RV_INIT_BYTES;
const_assert W_event_cmd_id == 8u && W_event_time_ns == 8u && W_event_messages_processed == 8u;
const_assert W_control_block_heartbeat == 8u && W_control_block_messages_processed == 8u;
const_assert W_control_block_hlc == 8u && W_control_block_stall_until_ns == 8u;
const_assert W_grid_header_keeper_heartbeat == 8u && W_grid_header_commands_processed == 8u;
const_assert W_grid_header_events_published == 8u;
const_assert W_keeper_record_init_old_processed == 8u && W_actor_record_beats == 8u;
const_assert W_actor_record_next_beat_ns == 8u;
const_assert W_bulk_ref_end == 4u && W_bulk_ref_len == 4u && O_bulk_ref_end == 0u && O_bulk_ref_len == 4u;
const_assert W_error_payload_code == 4u && O_error_payload_code == 0u && O_error_payload_detail == 4u;
const_assert W_k2k_cell_seq == 4u && O_k2k_cell_env % 16u == 0u;

// Words of an envelope (a private copy is an array of them).
const ENV_WORDS: u32 = SZ_envelope / 4u;
const PAYLOAD_WORD: u32 = O_envelope_payload / 4u;
const PAYLOAD_WORDS: u32 = RV_PAYLOAD_BYTES / 4u;

// ---- word access (byte offsets, 4-aligned) -------------------------------------------------------------------
fn s32(off: u32) -> u32 { return atomicLoad(&S[off >> 2u]); }
fn s32w(off: u32, v: u32) { atomicStore(&S[off >> 2u], v); }
fn l32(off: u32) -> u32 { return atomicLoad(&L[off >> 2u]); }
fn l32w(off: u32, v: u32) { atomicStore(&L[off >> 2u], v); }
fn s64(off: u32) -> vec2<u32> { return vec2<u32>(s32(off), s32(off + 4u)); }
fn s64w(off: u32, v: vec2<u32>) { s32w(off, v.x); s32w(off + 4u, v.y); }
fn l64(off: u32) -> vec2<u32> { return vec2<u32>(l32(off), l32(off + 4u)); }
fn l64w(off: u32, v: vec2<u32>) { l32w(off, v.x); l32w(off + 4u, v.y); }

// ---- 64-bit values as (lo, hi) ------------------------------------------------------------------------------
fn u64_of(lo: u32) -> vec2<u32> { return vec2<u32>(lo, 0u); }
fn u64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn u64_inc(a: vec2<u32>) -> vec2<u32> { return u64_add(a, vec2<u32>(1u, 0u)); }
fn u64_lt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
fn u64_eq(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x == b.x && a.y == b.y; }
fn u64_is_zero(a: vec2<u32>) -> bool { return a.x == 0u && a.y == 0u; }
fn u64_max(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(a, b, u64_lt(a, b)); }
fn u64_shl(a: vec2<u32>, n: u32) -> vec2<u32> {
    if (n == 0u) { return a; }
    if (n >= 32u) { return vec2<u32>(0u, a.x << (n - 32u)); }
    return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}
fn u64_shr(a: vec2<u32>, n: u32) -> vec2<u32> {
    if (n == 0u) { return a; }
    if (n >= 32u) { return vec2<u32>(a.y >> (n - 32u), 0u); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);
}
fn u64_xor(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return a ^ b; }
// The full 64-bit product of two 32-bit values.
fn u32_mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xFFFFu;
    let a1 = a >> 16u;
    let b0 = b & 0xFFFFu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xFFFFu) + (p10 & 0xFFFFu);
    let lo = (p00 & 0xFFFFu) | (mid << 16u);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}
// The low 64 bits of a * b.
fn u64_mul(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let low = u32_mul_wide(a.x, b.x);
    return vec2<u32>(low.x, low.y + a.x * b.y + a.y * b.x);
}
// a % n for n > 0 (n < 2^31).
fn u64_mod_u32(a: vec2<u32>, n: u32) -> u32 {
    var r = a.y % n;
    for (var i = U.zero; i < 32u; i = i + 1u) {
        r = (r << 1u) | ((a.x >> (31u - i)) & 1u);
        if (r >= n) { r = r - n; }
    }
    return r;
}

// ---- the clock ------------------------------------------------------------------------------------------------
// WGSL has no clock: the executor passes the host's time with each submit, so the device's time advances between
// submits, not within one (a behaviour cannot spin on the clock here).
fn rv_now() -> vec2<u32> { return U.now; }
fn rv_now_monotonic() -> vec2<u32> { return U.monotonic; }
