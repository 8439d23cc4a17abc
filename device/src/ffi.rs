//! Declarations of the host build of `kernels/` (compiled by `build.rs`).
//!
//! Only the CPU backend and the layout test call these. Every function here is the same C code NVRTC compiles
//! for the GPU (plus a few host-only helpers at the end of `kernels/host/rv_host.cpp`).

use crate::layout::{RawEnvelope, RawGridHeader, RawGridParams};
use core::ffi::c_char;

/// Opaque `rv_grid_view` (pointers into the two regions; allocated by the C side).
#[repr(C)]
pub struct RvGridView {
    _opaque: [u8; 0],
}

/// Opaque `rv_actor_ctx`.
#[repr(C)]
pub struct RvActorCtx {
    _opaque: [u8; 0],
}

/// `rv_behaviour_fn`: a behaviour's entry point.
pub type BehaviourFn = unsafe extern "C" fn(ctx: *mut RvActorCtx, msg: *const RawEnvelope) -> i32;

/// One entry of `rv_layout_report`.
#[repr(C)]
pub struct LayoutEntry {
    /// NUL-terminated name: `sizeof T`, `T.field` or a constant's name.
    pub name: *const c_char,
    /// Offset, size or value.
    pub value: u64,
    /// Field size, or alignment for a struct; 0 for constants.
    pub extra: u64,
}

extern "C" {
    pub fn rv_compute_layout(params: *const RawGridParams, header: *mut RawGridHeader) -> i32;
    pub fn rv_cpu_grid_new(shared: *mut u8, local: *mut u8, table: *const Option<BehaviourFn>) -> *mut RvGridView;
    pub fn rv_cpu_grid_free(view: *mut RvGridView);
    pub fn rv_keeper_step(view: *const RvGridView) -> u32;
    pub fn rv_actor_step(view: *const RvGridView, slot: u32, budget: u32) -> u32;
    pub fn rv_cpu_summary_words(view: *const RvGridView) -> u32;
    pub fn rv_cpu_summary(view: *const RvGridView, index: u32) -> u32;
    pub fn rv_cpu_host_seq(view: *const RvGridView, slot: u32) -> u32;
    pub fn rv_cpu_prefetch_watched(view: *const RvGridView, slot: u32);
    pub fn rv_cpu_watch_marks(view: *const RvGridView, slot: u32) -> u32;
    pub fn rv_cpu_mark_work(view: *const RvGridView, slot: u32) -> u32;
    pub fn rv_cpu_take_one_marked(view: *const RvGridView, word: u32, from: u32) -> u32;
    pub fn rv_cpu_run_slot(view: *const RvGridView, slot: u32, budget: u32, locks: *mut u32, pending: *mut u32) -> u32;
    pub fn rv_cpu_try_lock(flag: *mut u32) -> i32;
    pub fn rv_cpu_release(flag: *mut u32);
    pub fn rv_builtin_behaviour(id: u32) -> Option<BehaviourFn>;
    pub fn rv_layout_report(count: *mut u32) -> *const LayoutEntry;
    // The emulated CUDA driver's module: the CUDA entry points of kernels/cuda/rv_kernel.cu, one block per call.
    pub fn rv_emu_init_block(shared: *mut u8, local: *mut u8, block: u32, blocks: u32, threads: u32);
    pub fn rv_emu_persistent_block(
        shared: *mut u8,
        local: *mut u8,
        table: *const Option<BehaviourFn>,
        block: u32,
        slots_per_block: u32,
        budget: u32,
        max_iterations: u64,
        clock_skew_ns: i64,
        sys_latency_ns: u32,
        sys_read_ns: u32,
    );
    pub fn rv_emu_clock(cells: *mut u64, rounds: u64, clock_skew_ns: i64, sys_latency_ns: u32);
    pub fn rv_emu_floor(req: *mut u32, resp: *mut u32, n: u32, sys_latency_ns: u32);
    pub fn rv_emu_completed(word: *mut u32);
    pub fn rv_emu_observed(word: *const u32);
    pub fn rv_host_shared_accesses(loads: *mut u64, stores: *mut u64, releases: *mut u64, reset: i32);
    // The deterministic simulator (device/src/sim).
    pub fn rv_sim_install(hook: extern "C" fn(op: u32, p: *mut core::ffi::c_void, value: u64) -> u64);
    pub fn rv_sim_enter(on: i32, defects: u32);
    #[allow(clippy::too_many_arguments)]
    pub fn rv_sim_block(
        shared: *mut u8,
        local: *mut u8,
        table: *const Option<BehaviourFn>,
        block: u32,
        slots_per_block: u32,
        budget: u32,
        block0_backoff_ns: u32,
        actor_backoff_ns: u32,
    );
}
