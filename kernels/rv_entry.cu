/*
 * rv_entry.cu - what each block of the kernel does, written once for the CUDA entry points (cuda/rv_kernel.cu)
 * and for the emulated CUDA driver's host build (host/rv_host.cpp), which runs each block on a host thread.
 *
 * Block 0 is the keeper (it executes the host's lifecycle commands); block b >= 1 owns the slots [(b - 1) * slots_per_block, b * slots_per_block).
 * No grid-wide barrier anywhere: a stuck actor stalls only its own block's slots, never block 0.
 */
#ifndef RV_ENTRY_CU
#define RV_ENTRY_CU
#include "rv_protocol.cu"

/* The init kernel, for one thread: initialises the slots global_thread, global_thread + stride, ... */
RV_STEP_API void rv_init_thread(const rv_grid_view *v, uint32_t global_thread, uint32_t stride) {
    for (uint32_t slot = global_thread; slot < v->slot_count; slot += stride) rv_init_local_slot(v, slot);
}

/* A block that agreed to a pause (it holds one of the grid's acknowledgements, for the round that ends when the
 * count reaches `target`) and finds the pause withdrawn takes its acknowledgement back, unless every block has
 * agreed meanwhile: that decision stands (the count never goes down from the target), and it leaves with the
 * others. Returns 1 if it must leave. */
RV_FN int rv_pause_withdraw(const rv_grid_view *v, uint32_t target) {
    uint32_t *acks = &v->local_header->pause_acks;
    uint32_t count = rv_load_acquire_dev_u32(acks);
    while ((int32_t)(count - target) < 0) {
        uint32_t seen = rv_cas_u32(acks, count, count - 1);
        if (seen == count) return 0;
        count = seen;
    }
    return 1;
}

/* One idle pause of a block: 32 ns after work, doubling up to `max_ns` while the block stays idle. */
RV_FN void rv_idle_pause(uint32_t *backoff_ns, uint32_t max_ns) {
    *backoff_ns = *backoff_ns == 0 ? 32 : (*backoff_ns < max_ns ? *backoff_ns * 2 : max_ns);
    rv_pause(*backoff_ns);
}

/* The persistent kernel, for one block (its first thread). max_iterations == 0: runs until the host sets
 * terminate or pause (persistent mode); > 0: returns after that many iterations (event-driven mode, the host
 * relaunches). Idle, block 0 backs off up to block0_backoff_ns between steps, an actor block up to
 * actor_backoff_ns between sweeps (on a GPU every idle sweep reads mapped memory across PCIe: the host sizes
 * the actor blocks' pause with the grid, so that a large fleet of idle actors does not saturate the bus that
 * block 0's own accesses take). Every block counts itself in the local
 * header once per launch; block 0 publishes the count (the host's started-blocks handshake). An actor block
 * whose sweep published replies rings its doorbell (the host polls doorbells, not every slot).
 * A pause (the host's quiesce, cuda/quiesce.rs) is agreed by every block before any leaves: each block, between
 * two steps, adds itself to the grid's count and waits, doing no work, until the count says all have. A block
 * stuck in a behaviour never agrees; the host withdraws the pause after its wait and the blocks that had agreed
 * take their agreement back and go on: none has left, block 0 among them (they once left one by one, and a
 * withdrawn pause left the device without block 0 for good). */
RV_STEP_API void rv_block_run(const rv_grid_view *v, uint32_t block, uint32_t slots_per_block, uint32_t budget,
                              uint64_t max_iterations, uint32_t block0_backoff_ns, uint32_t actor_backoff_ns) {
    uint32_t max_backoff_ns = block == 0 ? block0_backoff_ns : actor_backoff_ns;
    rv_fetch_add_u32(&v->local_header->blocks_started, 1);
    uint32_t first = 0, last = 0;
    if (block > 0) {
        first = (block - 1) * slots_per_block;
        last = first + slots_per_block;
        if (last > v->slot_count) last = v->slot_count;
    }
    uint32_t published = 0;
    /* this block's doorbell count, carried over from the previous launch (event-driven mode relaunches) */
    uint32_t rings = block > 0 ? rv_load_relaxed_u32(&v->doorbells[block]) : 0;
    uint32_t backoff_ns = 0;
    uint32_t grid = 1 + (v->slot_count + slots_per_block - 1) / slots_per_block; /* as the host sizes it */
    uint32_t pause_target = 0; /* while this block agrees to a pause: the count at which every block has */
    uint64_t it = 0;
    for (; max_iterations == 0 || it < max_iterations; ++it) {
        /* terminate and device_faults are adjacent in the header: one 64-bit load reads both (one PCIe read on a
         * GPU). An injected halt: the kernel leaves for good and the device stops answering (device lost). */
        uint64_t flags = rv_load_acquire_u64((const uint64_t *)&v->header->terminate);
        uint32_t word = (uint32_t)flags;
        if ((word != 0 && word != RV_TERMINATE_PAUSE) || ((uint32_t)(flags >> 32) & RV_DEVICE_HALT)) break;
        if (word == RV_TERMINATE_PAUSE && pause_target == 0) {
            uint32_t before = rv_fetch_add_u32(&v->local_header->pause_acks, 1);
            pause_target = (before / grid + 1) * grid;
        }
        if (pause_target != 0) {
            if (word != RV_TERMINATE_PAUSE) {
                if (rv_pause_withdraw(v, pause_target)) break;
                pause_target = 0; /* withdrawn: back to work */
            } else if ((int32_t)(rv_load_acquire_dev_u32(&v->local_header->pause_acks) - pause_target) >= 0) {
                break; /* every block agreed: all leave */
            } else {
                /* Agreed: no more steps until the others agree or the pause is withdrawn (a block that went on
                 * working could enter a behaviour that never returns after agreeing, and hold the others). */
                rv_idle_pause(&backoff_ns, max_backoff_ns);
                continue;
            }
        }
        uint32_t progress = 0;
        if (block == 0) {
            uint32_t started = rv_load_relaxed_dev_u32(&v->local_header->blocks_started);
            if (started != published) {
                published = started;
                rv_store_release_u32(&v->header->blocks_started, started);
            }
            progress = rv_keeper_step(v);
        } else {
            for (uint32_t slot = first; slot < last; ++slot) progress |= rv_actor_step(v, slot, budget);
            /* Replies published: ring the block's doorbell, so the host reads this block's outboxes only. */
            if (progress & RV_STEP_REPLIED) rv_store_release_u32(&v->doorbells[block], ++rings);
        }
        if (progress & RV_STEP_PROGRESS) {
            backoff_ns = 0;
        } else {
            rv_idle_pause(&backoff_ns, max_backoff_ns);
        }
    }
    /* A bounded run's end (event-driven mode) with an agreement held: take it back, or the count of the next pause
     * would be off by it (a pause agreed meanwhile stands: the relaunch after it starts a new round). */
    if (pause_target != 0 && max_iterations != 0 && it == max_iterations) (void)rv_pause_withdraw(v, pause_target);
}
/* The clock probe (`cuda/clock.rs`): answers each round i = 1, 2, ..., rounds that the host stores into cells[0] with
 * the device's raw clock in cells[1], then i in cells[2] (release), all in mapped memory: the host brackets each
 * round with its own clock, and the narrowest bracket (one PCIe round trip) gives the clock's offset. The host
 * stores RV_FLOOR_STOP into cells[0] to end it early. */
RV_STEP_API void rv_clock_thread(uint64_t *cells, uint64_t rounds) {
    for (uint64_t i = 1; i <= rounds; ++i) {
        uint64_t seen;
        while ((seen = rv_load_acquire_u64(&cells[0])) != i && seen != RV_FLOOR_STOP) {
        }
        if (seen == RV_FLOOR_STOP) return;
        rv_store_relaxed_u64(&cells[1], rv_now_ns());
        rv_store_release_u64(&cells[2], i);
    }
}

/* The floor probe (`cuda::floor`): one thread answers each sequence number the host stores into req[0] by storing
 * it into resp[0], both in mapped memory, with the protocol's own system-scope loads and stores: the least a
 * round trip between the host and a persistent kernel can cost on this machine. n answers, or until the host
 * stores RV_FLOOR_STOP. */
RV_STEP_API void rv_floor_thread(const uint32_t *req, uint32_t *resp, uint32_t n) {
    for (uint32_t i = 1; i <= n; ++i) {
        uint32_t seen;
        while ((seen = rv_load_acquire_u32(req)) != i && seen != RV_FLOOR_STOP) {
        }
        if (seen == RV_FLOOR_STOP) return;
        rv_store_release_u32(resp, i);
    }
}
#endif /* RV_ENTRY_CU */
