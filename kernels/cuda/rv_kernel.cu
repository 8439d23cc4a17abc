/*
 * rv_kernel.cu - the CUDA entry points (NVRTC only). The host assembles one program from:
 *   rv_protocol.cu, builtins.cu, the user behaviours, a generated dispatch switch, and this file.
 *
 * One thread per block runs the protocol: block 0 is the device supervisor, block b >= 1 owns the slots
 * [(b - 1) * slots_per_block, b * slots_per_block). No grid-wide barrier anywhere: a stuck actor stalls
 * only its own block's slots, never block 0.
 */

extern "C" __global__ void rv_init_kernel(void *shared, void *local) {
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, 0) != RV_OK) return;
    uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t slot = blockIdx.x * blockDim.x + threadIdx.x; slot < v.slot_count; slot += stride)
        rv_init_local_slot(&v, slot);
}

/* max_iterations == 0: persistent mode (runs until the host sets terminate).
 * max_iterations > 0: event-driven mode (returns after that many iterations; the host relaunches). */
extern "C" __global__ void rv_persistent_kernel(void *shared, void *local, uint32_t slots_per_block, uint32_t budget,
                                                unsigned long long max_iterations) {
    if (threadIdx.x != 0) return;
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, 0) != RV_OK) return;
    uint32_t first = 0, last = 0;
    if (blockIdx.x > 0) {
        first = (blockIdx.x - 1) * slots_per_block;
        last = first + slots_per_block;
        if (last > v.slot_count) last = v.slot_count;
    }
    uint32_t backoff_ns = 0;
    for (unsigned long long it = 0; max_iterations == 0 || it < max_iterations; ++it) {
        if (rv_load_acquire_u32(&v.header->terminate) != 0) break;
        /* An injected halt: the kernel leaves for good and the device stops answering (device lost). */
        if (rv_load_acquire_u32(&v.header->device_faults) & RV_DEVICE_HALT) break;
        uint32_t progress = 0;
        if (blockIdx.x == 0) {
            progress = rv_supervisor_step(&v);
        } else {
            for (uint32_t slot = first; slot < last; ++slot) progress |= rv_actor_step(&v, slot, budget);
        }
        if (progress & RV_STEP_PROGRESS) {
            backoff_ns = 0;
        } else {
            backoff_ns = backoff_ns == 0 ? 32 : (backoff_ns < 8192 ? backoff_ns * 2 : 8192);
            rv_pause(backoff_ns);
        }
    }
}
