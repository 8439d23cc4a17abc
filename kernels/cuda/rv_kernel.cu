/*
 * rv_kernel.cu - the CUDA entry points (NVRTC only). The host assembles one program from:
 *   rv_protocol.cu, builtins.cu, the user behaviours, a generated dispatch switch, and this file.
 * What a block does is in rv_entry.cu, shared with the emulated driver's host build.
 */
#include "../rv_entry.cu"

/* Longest idle pause of block 0 between steps (an actor block's is the kernel's argument). */
#define RV_CUDA_BLOCK0_MAX_BACKOFF_NS 8192u

extern "C" __global__ void rv_init_kernel(void *shared, void *local) {
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, 0) != RV_OK) return;
    rv_init_thread(&v, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

/* One thread per block runs the protocol (see rv_block_run). */
extern "C" __global__ void rv_persistent_kernel(void *shared, void *local, uint32_t slots_per_block, uint32_t budget,
                                                unsigned long long max_iterations, uint32_t actor_backoff_ns) {
    if (threadIdx.x != 0) return;
    rv_grid_view v;
    if (rv_grid_view_init(&v, shared, local, 0) != RV_OK) return;
    rv_block_run(&v, blockIdx.x, slots_per_block, budget, max_iterations, RV_CUDA_BLOCK0_MAX_BACKOFF_NS,
                 actor_backoff_ns);
}

/* The clock probe's answering thread (rv_clock_thread): the host measures the offset of the device's raw clock
 * (%globaltimer has no defined epoch) round by round through mapped memory. */
extern "C" __global__ void rv_clock_kernel(unsigned long long *cells, unsigned long long rounds) {
    if (blockIdx.x == 0 && threadIdx.x == 0) rv_clock_thread((uint64_t *)cells, rounds);
}

/* The floor probe's answering thread (rv_floor_thread), and an empty kernel (the cost of a launch + sync). */
extern "C" __global__ void rv_floor_kernel(uint32_t *req, uint32_t *resp, uint32_t n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) rv_floor_thread(req, resp, n);
}
extern "C" __global__ void rv_empty_kernel(void) {}
