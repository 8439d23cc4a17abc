/*
 * rv_host.cpp - the CPU backend's build of the device code: the protocol and the built-in behaviours, plus
 * the few host-only helpers the Rust executor calls (slot locks, behaviour table, layout report).
 * Built by device/build.rs with the cc crate.
 */
#include <stdlib.h>
#include <string.h>

#include "../rv_entry.cu"
#include "../builtins.cu"
#include "../rv_builtins.h"

/* The host's table of built-ins, from the one list (rv_builtins.h). */
extern "C" rv_behaviour_fn rv_builtin_behaviour(uint32_t id) {
#define RV_BUILTIN_CASE(id, name) \
    case id: return rv_behaviour_##name;
    switch (id) {
        RV_BUILTINS(RV_BUILTIN_CASE)
    default: return 0;
    }
#undef RV_BUILTIN_CASE
}

extern "C" void rv_cpu_grid_free(rv_grid_view *v) {
    if (v == 0) return;
    free(v->work_summary); /* the run set's one block (rv_cpu_grid_new) */
    free(v);
}

/* Run-set words (32 slots each) and summary words (32 run-set words each) of a grid of `slots` slots. */
static uint32_t rv_cpu_words(uint32_t slots) { return (slots + 31u) / 32u; }
extern "C" uint32_t rv_cpu_summary_words(const rv_grid_view *v) { return (rv_cpu_words(v->slot_count) + 31u) / 32u; }

/* A view over the two regions, with a run set in which every slot is marked (the first pass looks at each
 * once); NULL if the header is not a ringvisor grid or memory runs out. Free with rv_cpu_grid_free. */
extern "C" rv_grid_view *rv_cpu_grid_new(void *shared, void *local, const rv_behaviour_fn *table) {
    rv_grid_view *v = (rv_grid_view *)calloc(1, sizeof(rv_grid_view));
    if (v == 0) return 0;
    if (rv_grid_view_init(v, shared, local, table) != RV_OK) {
        free(v);
        return 0;
    }
    /* The run set in one block of whole cache lines, the summary words first: a grid of up to 480 slots has its
     * summary and its first run-set words on one line, so a sender's two marks and a runner's take move one line
     * between cores, not two; and no other data of the process shares those lines (a small allocation of its
     * own would share a line with whatever the allocator put beside it). */
    size_t words = (size_t)rv_cpu_summary_words(v) + rv_cpu_words(v->slot_count);
    size_t bytes = (words * sizeof(uint32_t) + 63u) & ~(size_t)63u;
    uint32_t *run_set = (uint32_t *)aligned_alloc(64, bytes);
    if (run_set == 0) {
        free(v);
        return 0;
    }
    memset(run_set, 0, bytes);
    v->work_summary = run_set;
    v->work = run_set + rv_cpu_summary_words(v);
    for (uint32_t s = 0; s < v->slot_count; ++s) {
        rv_init_local_slot(v, s);
        rv_mark_work(v, s);
    }
    return v;
}

/* The host gave `slot` work (a message, a fault), published before this call. Returns 1 if it marked the slot,
 * 0 if the slot was marked already (or is out of range): its runner has not taken the mark yet, and reads the
 * work published before this call when it does. Every mark is a read-modify-write of the word (release), and so
 * is the runner's take (rv_cpu_take_one_marked's compare-and-swap, acquire): the take reads from the last mark
 * before it, and every mark before that one heads a release sequence of read-modify-writes the take reads
 * from, so the step that follows sees the work each of them published. A mark after the take sets the bit
 * again. (A load of the word, to skip the mark when the bit is set, needed a fence on both sides: two fences
 * on a call's path, 10-15 ns of a 350 ns latency-mode call.) A sender that finds the mark already there skips
 * the summary's read-modify-write (rv_mark_work's steps, here with sequentially consistent read-modify-writes: the
 * sender then reads the pool's sleeper count with a sequentially consistent load and no fence, see
 * `Parker::wake_sleepers_after_seq_cst_mark`; a worker's mark of its own slot goes through rv_mark_work). */
extern "C" uint32_t rv_cpu_mark_work(const rv_grid_view *v, uint32_t slot) {
    if (slot >= v->slot_count) return 0;
    uint32_t word = slot >> 5;
    uint32_t bit = 1u << (slot & 31u);
    if (rv_fetch_or_seq_cst_u32(&v->work[word], bit) & bit) return 0;
    rv_fetch_or_seq_cst_u32(&v->work_summary[word >> 5], 1u << (word & 31u));
    return 1;
}

/* Summary word `index`: which run-set words may have marked slots (a hint; rv_cpu_run_marked decides). */
extern "C" uint32_t rv_cpu_summary(const rv_grid_view *v, uint32_t index) {
    return rv_load_relaxed_dev_u32(&v->work_summary[index]);
}

/* `slot`'s `host_seq` (0 for a slot out of range): the word the host bumps, with a releasing store, after every
 * write its actor must notice. A worker watching the slot (the CPU executor's `watch`) loads it in each round and
 * runs the slot's step when it moves; the step reads what was published with its own acquiring loads, so this
 * load is relaxed. */
extern "C" uint32_t rv_cpu_host_seq(const rv_grid_view *v, uint32_t slot) {
    if (slot >= v->slot_count) return 0;
    return rv_load_relaxed_u32(&v->blocks[slot].host_seq);
}

/* What the run set marks, for a worker watching `slot`: 0 nothing, 1 `slot` alone, 2 another slot (the worker
 * goes back to its passes). Loads only: a hint, as the summary is (a mark that lands after the look is seen at
 * the next). */
extern "C" uint32_t rv_cpu_watch_marks(const rv_grid_view *v, uint32_t slot) {
    if (slot >= v->slot_count) return 2;
    uint32_t own_word = slot >> 5;
    for (uint32_t i = 0; i < rv_cpu_summary_words(v); ++i) {
        uint32_t words = rv_load_relaxed_dev_u32(&v->work_summary[i]);
        if (i == own_word >> 5) words &= ~(1u << (own_word & 31u));
        if (words != 0) return 2;
    }
    uint32_t marks = rv_load_relaxed_dev_u32(&v->work[own_word]);
    if ((marks & ~(1u << (slot & 31u))) != 0) return 2;
    return marks != 0 ? 1 : 0;
}

/* Asks for the lines the step of `slot` reads first from what the host wrote (the control block's line 3, with
 * `host_seq` and the inbox tail, and the inbox cell at the actor's head: the message the mark announces), before
 * the taker's read-modify-writes of the run set. A locked instruction holds back every load after it until it
 * completes, and the run set's line, just marked by the sender, has to be fetched for it from the sender's core;
 * the step's loads then went to the sender's core again, one transfer after the other. A prefetch is a hint,
 * not a load the memory model orders (a stale head names a cell the step does not read: nothing is lost but
 * the prefetch); the head is read with a relaxed load (its writers store it atomically). On a 2-core AMD EPYC VM,
 * a latency-mode call 1,002-1,031 -> 911-951 ns in the VM's slow mode (docs/benchmarks.md). */
static void rv_cpu_prefetch_step(const rv_grid_view *v, uint32_t slot) {
    if (slot >= v->slot_count) return;
    rv_control_block *cb = &v->blocks[slot];
    __builtin_prefetch(&cb->inbox_tail, 0, 3);
    const char *cell = (const char *)rv_inbox_cell(v, slot, rv_load_relaxed_dev_u32(&cb->inbox_head));
    for (size_t line = 0; line < sizeof(rv_envelope); line += 64) __builtin_prefetch(cell + line, 0, 3);
}

/* The same lines, asked for by a worker watching `slot` (the CPU executor's `watch`) in every round and again as
 * soon as it saw `host_seq` move: the inbox cell then travels with `host_seq`'s line, or at worst while the watcher
 * takes the slot's lock and begins the step, instead of after the step's first loads. */
extern "C" void rv_cpu_prefetch_watched(const rv_grid_view *v, uint32_t slot) { rv_cpu_prefetch_step(v, slot); }

/* Takes the mark of one slot of run-set word `word`, the lowest at or above bit `from` (0 to 31); returns its bit,
 * or 32 when none is marked there. The other marks stay in the run set (the summary bit set again while some are
 * left), so a worker that then runs a behaviour that never returns strands no other slot: whoever looks next
 * takes them. A caller walks a word upwards (`from` = the last bit + 1), so a slot that marks itself again after
 * each step (a stalled actor) runs once per walk and never starves the slots above it. The summary bit is cleared
 * before the mark is taken, so a mark that lands after either is seen by a later pass. */
extern "C" uint32_t rv_cpu_take_one_marked(const rv_grid_view *v, uint32_t word, uint32_t from) {
    if (from >= 32) return 32;
    uint32_t *summary = &v->work_summary[word >> 5];
    uint32_t summary_bit = 1u << (word & 31u);
    uint32_t *marks = &v->work[word];
    uint32_t ahead = rv_load_relaxed_dev_u32(marks) & (~0u << from);
    if (ahead != 0) rv_cpu_prefetch_step(v, word * 32u + rv_ctz_u32(ahead));
    rv_fetch_and_u32(summary, ~summary_bit);
    uint32_t bits = rv_load_relaxed_dev_u32(marks);
    for (;;) {
        uint32_t eligible = bits & (~0u << from);
        if (eligible == 0) {
            if (bits != 0) rv_fetch_or_u32(summary, summary_bit); /* marks below `from` stay for a later pass */
            return 32;
        }
        uint32_t lowest = eligible & (0u - eligible);
        uint32_t seen = rv_cas_u32(marks, bits, bits & ~lowest);
        if (seen != bits) {
            bits = seen;
            continue;
        }
        if (bits != lowest) rv_fetch_or_u32(summary, summary_bit); /* the others are still marked */
        return rv_ctz_u32(lowest);
    }
}

/* Runs `slot`'s step, its mark taken, unless another worker runs it now. One worker at a time runs a slot (its
 * lock, locks[slot]); a worker stuck in the slot's behaviour holds that slot alone, never its neighbours (the
 * other slots of its word are taken and run by whoever finds them marked). A worker that finds the slot locked
 * leaves `pending[slot]` set for the one that holds it, which runs the slot again when it lets go (both lock
 * operations are read-modify-writes of one word, so either the second worker's lock succeeds or the holder's
 * release reads from it, acquiring its `pending` store: a plain load then sees it). The holder clears `pending`
 * only when it finds it set (one that lands after the look makes it step again). A step that did not end quiet
 * (messages left, a stall, an init, a drain) marks the slot again, so it runs on the next pass. Returns the
 * steps' results. */
extern "C" uint32_t rv_cpu_run_slot(const rv_grid_view *v, uint32_t slot, uint32_t budget, uint32_t *locks,
                                    uint32_t *pending) {
    if (rv_exchange_u32(&locks[slot], 1) != 0) {
        rv_exchange_u32(&pending[slot], 1);
        if (rv_exchange_u32(&locks[slot], 1) != 0) return 0; /* the holder runs it again when it lets go */
    }
    uint32_t out = 0;
    for (;;) {
        if (rv_load_relaxed_dev_u32(&pending[slot]) != 0) rv_exchange_u32(&pending[slot], 0);
        out |= rv_actor_step(v, slot, budget);
        if (v->actors[slot].quiet == RV_QUIET_NO) rv_mark_work(v, slot);
        rv_exchange_u32(&locks[slot], 0);
        if (rv_load_relaxed_dev_u32(&pending[slot]) == 0) break;
        if (rv_exchange_u32(&locks[slot], 1) != 0) break; /* another worker took it over */
    }
    return out;
}

/* The lock of block 0 for the worker pool: one worker steps block 0 at a time. Done here, in the instrumented
 * code, so that ThreadSanitizer sees the happens-before edge between two workers. */
extern "C" int rv_cpu_try_lock(uint32_t *flag) { return rv_exchange_u32(flag, 1) == 0; }
extern "C" void rv_cpu_release(uint32_t *flag) { rv_store_release_u32(flag, 0); }

/* ---------------------------------------------------------------------------------------------------
 * The emulated CUDA driver's "module": the CUDA entry points of cuda/rv_kernel.cu, one call per block, run on
 * a host thread each. `table` is the host behaviour table (CUDA dispatches through a generated switch);
 * `clock_skew_ns` gives the thread's device clock an epoch of its own, as %globaltimer has.
 * ------------------------------------------------------------------------------------------------- */
#define RV_EMULATED_MAX_BACKOFF_NS 200000u

extern "C" void rv_emu_init_block(void *shared, void *local, uint32_t block, uint32_t blocks, uint32_t threads) {
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, 0) != RV_OK) return;
    for (uint32_t t = 0; t < threads; ++t) rv_init_thread(&v, block * threads + t, blocks * threads);
}

extern "C" void rv_emu_persistent_block(void *shared, void *local, const rv_behaviour_fn *table, uint32_t block,
                                        uint32_t slots_per_block, uint32_t budget, uint64_t max_iterations,
                                        int64_t clock_skew_ns, uint32_t sys_latency_ns, uint32_t sys_read_ns) {
    rv_host_clock_skew_ns = clock_skew_ns;
    rv_host_sys_latency_ns = sys_latency_ns;
    rv_host_sys_read_ns = sys_read_ns;
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, table) != RV_OK) return;
    rv_block_run(&v, block, slots_per_block, budget, max_iterations, RV_EMULATED_MAX_BACKOFF_NS,
                 RV_EMULATED_MAX_BACKOFF_NS);
}

extern "C" void rv_emu_floor(uint32_t *req, uint32_t *resp, uint32_t n, uint32_t sys_latency_ns) {
    rv_host_sys_latency_ns = sys_latency_ns;
    rv_floor_thread(req, resp, n);
}

/* The emulated driver's completion edge, made in instrumented code so ThreadSanitizer sees it: a kernel thread
 * releases after its blocks ran; the host acquires when it learns the kernel completed (the driver's own
 * book-keeping is Rust, which ThreadSanitizer does not see). */
extern "C" void rv_emu_completed(uint32_t *word) { rv_fetch_add_u32(word, 1); }
extern "C" void rv_emu_observed(const uint32_t *word) { (void)rv_load_acquire_dev_u32(word); }

extern "C" void rv_emu_clock(uint64_t *cells, uint64_t rounds, int64_t clock_skew_ns, uint32_t sys_latency_ns) {
    rv_host_clock_skew_ns = clock_skew_ns;
    rv_host_sys_latency_ns = sys_latency_ns;
    rv_clock_thread(cells, rounds);
    rv_host_sys_latency_ns = 0;
    rv_host_clock_skew_ns = 0;
}

/* The deterministic simulator (device/src/sim): installs its hook (process-wide, once), and makes the calling
 * thread one it runs (`on`), with the defect switches `defects` (bits RV_DEFECT_*), or an ordinary thread again. */
extern "C" void rv_sim_install(rv_sim_hook_fn hook) { rv_sim_hook = hook; }
extern "C" void rv_sim_enter(int on, uint32_t defects) {
    rv_sim_thread = on && rv_sim_hook != 0;
    rv_sim_defects = rv_sim_thread ? defects : 0;
}

/* One block of the persistent kernel on a simulated thread: the CUDA entry's loop (rv_block_run) with the pauses
 * the simulator's run asks for, until the host asks the grid to terminate. */
extern "C" void rv_sim_block(void *shared, void *local, const rv_behaviour_fn *table, uint32_t block,
                             uint32_t slots_per_block, uint32_t budget, uint32_t block0_backoff_ns,
                             uint32_t actor_backoff_ns) {
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, table) != RV_OK) return;
    rv_block_run(&v, block, slots_per_block, budget, 0, block0_backoff_ns, actor_backoff_ns);
}

/* The calling thread's system-scope (shared-region) loads, stores, and of the stores those with release order, since
 * its last reset (see rv_port.h). */
extern "C" void rv_host_shared_accesses(uint64_t *loads, uint64_t *stores, uint64_t *releases, int reset) {
    *loads = rv_host_shared_loads;
    *stores = rv_host_shared_stores;
    *releases = rv_host_shared_releases;
    if (reset) rv_host_shared_loads = rv_host_shared_stores = rv_host_shared_releases = 0;
}

#include "rv_layout_report.inc"
