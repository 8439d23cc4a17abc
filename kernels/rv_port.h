/*
 * rv_port.h - the portability layer of ringvisor's device code.
 *
 * The protocol in this directory is compiled twice: by NVRTC as CUDA (for the GPU) and by the host C++
 * compiler (for the CPU backend, which runs the very same step functions on a pool of host threads).
 * This header maps the few intrinsics the protocol needs onto each target:
 *
 *   - single-field loads/stores with acquire/release ordering (host<->device and device<->device);
 *   - device-scope read-modify-write atomics (only ever used on device-local memory, never across PCIe);
 *   - fences, a clock, and a polite sleep.
 *
 * Nothing else in kernels/ may use a target-specific intrinsic directly.
 */
#ifndef RV_PORT_H
#define RV_PORT_H

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define RV_CUDA 1
#else
#define RV_CUDA 0
#endif

#if RV_CUDA
/* NVRTC provides no libc headers: fixed-width types by hand. */
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define RV_FN __device__ static inline
#define RV_API extern "C" __device__
#define RV_ALIGN(n) __align__(n)
#define RV_STATIC_ASSERT(c, m) static_assert(c, m)
/* A constant-expression offsetof for static_assert: NVRTC has no <stddef.h> and no __builtin_offsetof, and
 * NVRTC 13 does not fold the null-pointer form; its front end's __INTADDR__ folds it (11.8 and 13 both). */
#define RV_OFFSETOF(t, f) ((uint32_t)__INTADDR__(&((t *)0)->f))
#else
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sched.h>
#define RV_FN static inline
#define RV_API extern "C"
#define RV_ALIGN(n) alignas(n)
#define RV_STATIC_ASSERT(c, m) static_assert(c, m)
#define RV_OFFSETOF(t, f) ((uint32_t)offsetof(t, f))
#endif

/* ---------------------------------------------------------------------------------------------------
 * Single-field atomics. "sys" scope on CUDA: these fields live in mapped host memory or are read by the host.
 * ------------------------------------------------------------------------------------------------- */
#if RV_CUDA
RV_FN uint32_t rv_load_acquire_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
RV_FN void rv_store_release_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
RV_FN uint64_t rv_load_acquire_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
RV_FN void rv_store_release_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
RV_FN uint32_t rv_load_relaxed_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
RV_FN void rv_store_relaxed_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
RV_FN void rv_store_relaxed_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
RV_FN uint64_t rv_load_relaxed_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
/* Device-scope ("gpu") loads and stores, for the LOCAL region (device memory no host thread reads): cheaper
 * than system scope, which must order against the host across PCIe. */
RV_FN uint32_t rv_load_acquire_dev_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
RV_FN void rv_store_release_dev_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
RV_FN uint32_t rv_load_relaxed_dev_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
/* Device-scope RMW, for device-local memory only (kernel-to-kernel rings, attention bitmap). */
RV_FN uint32_t rv_cas_u32(uint32_t *p, uint32_t expected, uint32_t desired) {
    __threadfence();
    uint32_t old = atomicCAS(p, expected, desired);
    __threadfence();
    return old;
}
RV_FN uint32_t rv_fetch_or_u32(uint32_t *p, uint32_t bits) {
    __threadfence();
    uint32_t old = atomicOr(p, bits);
    __threadfence();
    return old;
}
RV_FN uint32_t rv_exchange_u32(uint32_t *p, uint32_t v) {
    __threadfence();
    uint32_t old = atomicExch(p, v);
    __threadfence();
    return old;
}
RV_FN uint32_t rv_fetch_add_u32(uint32_t *p, uint32_t v) {
    __threadfence();
    uint32_t old = atomicAdd(p, v);
    __threadfence();
    return old;
}
RV_FN uint32_t rv_fetch_and_u32(uint32_t *p, uint32_t bits) {
    __threadfence();
    uint32_t old = atomicAnd(p, bits);
    __threadfence();
    return old;
}
RV_FN void rv_fence(void) { __threadfence_system(); }
RV_FN uint64_t rv_now_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* The GPU's global timer never steps with the host's clock: the raw value is monotonic. */
RV_FN uint64_t rv_now_monotonic_ns(void) { return rv_now_ns(); }
/* The clock where a few milliseconds' resolution will do (a message's HLC, an idle actor's beat pacing). */
RV_FN uint64_t rv_now_coarse_ns(void) { return rv_now_ns(); }
/* A timer read costs a few cycles here: an actor step stamps its start always (see rv_actor_step). */
#define RV_CHEAP_CLOCK 1
/* A word read as a hint, outside the protocol's ordering (unused on a GPU: see RV_CHEAP_CLOCK). */
RV_FN uint32_t rv_peek_u32(const uint32_t *p) { return *(const volatile uint32_t *)p; }
/* __nanosleep sleeps at most about a millisecond: a longer pause is several. */
RV_FN void rv_pause(uint32_t ns) {
    for (; ns > 1000000u; ns -= 1000000u) __nanosleep(1000000u);
    __nanosleep(ns);
}
RV_FN uint32_t rv_ctz_u32(uint32_t x) { return (uint32_t)(__ffs((int)x) - 1); }
/* The simulator's defect switches (see the host build below) do not exist on a GPU. */
#define RV_DEFECT(n) 0
#else
/* The deterministic simulator (device/src/sim, docs/faults.md): on a thread it runs (rv_sim_thread set), every
 * system-scope access, every synchronising access of the local region, every fence, clock read, pause and 16-byte
 * copy goes through its hook. There it may hand the thread's turn to another simulated thread, keep the thread's
 * stores to the shared region from the other threads until its memory model lets them be seen, and read the time
 * it keeps. On every other thread the hook is never consulted. */
typedef uint64_t (*rv_sim_hook_fn)(uint32_t op, void *p, uint64_t value);
static rv_sim_hook_fn rv_sim_hook = 0;
static thread_local int rv_sim_thread = 0;
/* The hook's operations (low byte), the access's size in bytes (second byte) and its ordering (RV_SIM_ORDERED:
 * acquire for a load, release for a store, a read-modify-write for RV_SIM_SYNC). */
#define RV_SIM_LOAD 1u   /* returns the value the thread may see at p */
#define RV_SIM_STORE 2u  /* stores value at p */
#define RV_SIM_FENCE 3u  /* the thread's earlier stores become visible */
#define RV_SIM_SYNC 4u   /* a point before a local-region access or read-modify-write, which the caller then makes */
#define RV_SIM_NOW 5u    /* returns the simulated clock */
#define RV_SIM_PAUSE 6u  /* sleeps value ns of simulated time */
#define RV_SIM_COPY 7u   /* p: an rv_sim_copy_args */
#define RV_SIM_ORDERED 0x10000u
#define RV_SIM_SIZE(n) ((uint32_t)(n) << 8)
struct rv_sim_copy_args {
    void *dst;
    const void *src; /* 0: zero the destination */
    uint64_t bytes;
};
/* The simulator's switches, each putting back one ordering defect that a GPU found and the protocol fixed, so
 * that the simulator can show it finds them (device/src/sim/mod.rs, Defect). Per simulated thread: zero on
 * every other thread, and compiled out of the CUDA build. */
static thread_local uint32_t rv_sim_defects __attribute__((unused)) = 0;
#define RV_DEFECT(n) (rv_sim_defects & (1u << (n)))
/* The defects (docs/faults.md). Found by GPUs: an actor published a reply before it moved its inbox head past the
 * message; it read its fault bits before its inbox tail; block 0 carried out every queued command in one step and
 * beat once a step. Found by the simulator: an actor read the device's fault word before its inbox tail; it took a
 * one-shot fault's kind from the step's copy of the bits; it published the error answering a corrupt message
 * before it moved its inbox head past the message. Only lines that name RV_DEFECT differ, and those that
 * start `if (RV_DEFECT(` run for the defect alone (protocol_mirror.rs leaves them out). */
#define RV_DEFECT_REPLY_BEFORE_CONSUMED 0
#define RV_DEFECT_FAULTS_BEFORE_TAIL 1
#define RV_DEFECT_KEEPER_BEATS_ONCE_A_STEP 2
#define RV_DEFECT_DEVICE_FAULTS_BEFORE_TAIL 3
#define RV_DEFECT_ONE_SHOT_KIND_FROM_STEP 4
#define RV_DEFECT_ERROR_REPLY_BEFORE_CONSUMED 5
#define RV_SIM_POINT(op, p)                                                                                    \
    do {                                                                                                       \
        if (rv_sim_thread) (void)rv_sim_hook((op), (void *)(p), 0);                                            \
    } while (0)
/* The host build counts the system-scope (shared-region) accesses of each thread: on a GPU each is a PCIe
 * transaction, so tests hold the protocol to a budget (see rv_host_shared_accesses in host/rv_host.cpp). */
static thread_local uint64_t rv_host_shared_loads = 0;
static thread_local uint64_t rv_host_shared_stores = 0;
static thread_local uint64_t rv_host_shared_releases = 0; /* of the stores, those with release order */
/* The emulated CUDA driver's cost model of mapped memory: on its kernel threads every system-scope load and release
 * store waits this long (a PCIe round trip, or a release's wait for the earlier stores; 0 on every other thread),
 * so timing the CPU hides shows in CI. A relaxed store is posted: it costs nothing, as on a GPU. */
static thread_local uint32_t rv_host_sys_latency_ns = 0;
/* ... and each further read of a batch issued together waits this long (its turn in the device's budget of reads
 * of mapped memory; 0 on every other thread). */
static thread_local uint32_t rv_host_sys_read_ns = 0;
RV_FN void rv_host_sys_wait(void) {
    if (rv_host_sys_latency_ns == 0) return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec - (uint64_t)t0.tv_nsec <
             rv_host_sys_latency_ns);
}
#define RV_HOST_SHARED_LOAD(name, T, order)                                                                    \
    RV_FN T name(const T *p) {                                                                                 \
        rv_host_shared_loads += 1;                                                                             \
        if (rv_sim_thread)                                                                                     \
            return (T)rv_sim_hook(RV_SIM_LOAD | RV_SIM_SIZE(sizeof(T)) |                                        \
                                      (order == __ATOMIC_RELAXED ? 0u : RV_SIM_ORDERED),                       \
                                  (void *)p, 0);                                                               \
        rv_host_sys_wait();                                                                                    \
        return __atomic_load_n(p, order);                                                                      \
    }
#define RV_HOST_SHARED_STORE(name, T, order)                                                                   \
    RV_FN void name(T *p, T v) {                                                                               \
        rv_host_shared_stores += 1;                                                                            \
        rv_host_shared_releases += order != __ATOMIC_RELAXED;                                                  \
        if (rv_sim_thread) {                                                                                   \
            (void)rv_sim_hook(RV_SIM_STORE | RV_SIM_SIZE(sizeof(T)) |                                           \
                                  (order == __ATOMIC_RELAXED ? 0u : RV_SIM_ORDERED),                           \
                              (void *)p, (uint64_t)v);                                                         \
            return;                                                                                            \
        }                                                                                                      \
        if (order != __ATOMIC_RELAXED) rv_host_sys_wait();                                                     \
        __atomic_store_n(p, v, order);                                                                         \
    }
RV_HOST_SHARED_LOAD(rv_load_acquire_u32, uint32_t, __ATOMIC_ACQUIRE)
RV_HOST_SHARED_LOAD(rv_load_acquire_u64, uint64_t, __ATOMIC_ACQUIRE)
RV_HOST_SHARED_LOAD(rv_load_relaxed_u32, uint32_t, __ATOMIC_RELAXED)
RV_HOST_SHARED_LOAD(rv_load_relaxed_u64, uint64_t, __ATOMIC_RELAXED)
RV_HOST_SHARED_STORE(rv_store_release_u32, uint32_t, __ATOMIC_RELEASE)
RV_HOST_SHARED_STORE(rv_store_release_u64, uint64_t, __ATOMIC_RELEASE)
RV_HOST_SHARED_STORE(rv_store_relaxed_u32, uint32_t, __ATOMIC_RELAXED)
RV_HOST_SHARED_STORE(rv_store_relaxed_u64, uint64_t, __ATOMIC_RELAXED)
/* The host build has one scope: the LOCAL-region variants are the same operations. */
RV_FN uint32_t rv_load_acquire_dev_u32(const uint32_t *p) {
    RV_SIM_POINT(RV_SIM_SYNC, p);
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
RV_FN void rv_store_release_dev_u32(uint32_t *p, uint32_t v) {
    RV_SIM_POINT(RV_SIM_SYNC | RV_SIM_ORDERED, p);
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
RV_FN uint32_t rv_load_relaxed_dev_u32(const uint32_t *p) {
    RV_SIM_POINT(RV_SIM_SYNC, p);
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
RV_FN uint32_t rv_cas_u32(uint32_t *p, uint32_t expected, uint32_t desired) {
    RV_SIM_POINT(RV_SIM_SYNC | RV_SIM_ORDERED, p);
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
}
#define RV_HOST_RMW(name, builtin)                                                                             \
    RV_FN uint32_t name(uint32_t *p, uint32_t v) {                                                             \
        RV_SIM_POINT(RV_SIM_SYNC | RV_SIM_ORDERED, p);                                                         \
        return builtin(p, v, __ATOMIC_ACQ_REL);                                                                \
    }
RV_HOST_RMW(rv_fetch_or_u32, __atomic_fetch_or)
RV_HOST_RMW(rv_exchange_u32, __atomic_exchange_n)
RV_HOST_RMW(rv_fetch_add_u32, __atomic_fetch_add)
RV_HOST_RMW(rv_fetch_and_u32, __atomic_fetch_and)
/* A sequentially consistent fetch-or (host only): a mark that a waker follows with a sequentially consistent load
 * instead of a fence (rv_cpu_mark_work; on x86 the same locked instruction as the acq_rel one, and no mfence). */
RV_FN uint32_t rv_fetch_or_seq_cst_u32(uint32_t *p, uint32_t v) {
    RV_SIM_POINT(RV_SIM_SYNC | RV_SIM_ORDERED, p);
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
#if defined(__SANITIZE_THREAD__)
#define RV_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RV_THREAD_SANITIZER 1
#endif
#endif
#ifdef RV_THREAD_SANITIZER
/* ThreadSanitizer does not model fences (GCC refuses them under -Werror=tsan). A sequentially consistent
 * read-modify-write of one shared word gives the same guarantee to the store-buffer pairs rv_fence serves:
 * the two sides' RMWs are ordered, and the later one reads from (synchronises with) the earlier one, so
 * either side sees the store the other made before its RMW. Sanitizer builds only: it serialises the pairs. */
static uint32_t rv_tsan_fence_word;
RV_FN void rv_fence(void) { (void)__atomic_fetch_add(&rv_tsan_fence_word, 0u, __ATOMIC_SEQ_CST); }
#else
RV_FN void rv_fence(void) {
    RV_SIM_POINT(RV_SIM_FENCE, 0);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif
/* The emulated CUDA driver runs kernel blocks on host threads and gives each a skewed clock, as a GPU's
 * %globaltimer has an epoch of its own; 0 on every other thread. */
static thread_local int64_t rv_host_clock_skew_ns = 0;
RV_FN uint64_t rv_now_ns(void) {
    if (rv_sim_thread) return rv_sim_hook(RV_SIM_NOW, 0, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)((int64_t)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) + rv_host_clock_skew_ns);
}
/* The clock where a few milliseconds' resolution will do (a message's HLC, an idle actor's beat pacing): the
 * kernel's last tick (CLOCK_REALTIME_COARSE, skewed as rv_now_ns), about 3 ns a read on the development VM where
 * the precise clock costs 20. */
RV_FN uint64_t rv_now_coarse_ns(void) {
    if (rv_sim_thread) return rv_sim_hook(RV_SIM_NOW, 0, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)((int64_t)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) + rv_host_clock_skew_ns);
}
/* A precise clock read costs a twentieth of a latency-mode call here: an actor step stamps its start only while the
 * host has a traced call in flight (see rv_actor_step). */
#define RV_CHEAP_CLOCK 0
/* A word read as a hint, outside the protocol's ordering: a relaxed load the simulator neither schedules around nor
 * delays (a stale value costs a hint, never correctness). */
RV_FN uint32_t rv_peek_u32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
/* A clock that never steps (CLOCK_MONOTONIC; unskewed: differences are what it is for). */
RV_FN uint64_t rv_now_monotonic_ns(void) {
    if (rv_sim_thread) return rv_sim_hook(RV_SIM_NOW, 0, 0);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Short pauses yield; longer ones sleep (only the emulated driver's kernel threads pause that long). */
RV_FN void rv_pause(uint32_t ns) {
    if (rv_sim_thread) {
        (void)rv_sim_hook(RV_SIM_PAUSE, 0, ns);
        return;
    }
    if (ns < 1000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (long)ns};
    nanosleep(&ts, 0);
}
RV_FN uint32_t rv_ctz_u32(uint32_t x) { return (uint32_t)__builtin_ctz(x); }
#endif

/* 16-byte copies and zeroing, for aligned data: one 16-byte access each on the GPU (a byte loop would be 16
 * separate transactions, each a PCIe round trip on mapped memory). `units` counts 16-byte units. */
#if RV_CUDA
/* Copies `units` 16-byte units with plain 16-byte loads: up to RV_LOADS_IN_FLIGHT loads are issued before the first
 * store that uses one. A store waits for its load, so a load-store pair per 16 bytes waits out one memory round
 * trip each: across PCIe (mapped memory: host cells, bulk payloads) eight pairs cost eight round trips; issued
 * together the loads overlap and cost about one. */
#define RV_LOADS_IN_FLIGHT 8u
#define RV_COPY16_BATCHED(dst, src, units)                                                                     \
    for (uint32_t i = 0; i < (units); i += RV_LOADS_IN_FLIGHT) {                                               \
        uint32_t n = (units) - i < RV_LOADS_IN_FLIGHT ? (units) - i : RV_LOADS_IN_FLIGHT;                      \
        unsigned long long v[2 * RV_LOADS_IN_FLIGHT];                                                          \
        _Pragma("unroll") for (uint32_t j = 0; j < RV_LOADS_IN_FLIGHT; ++j) {                                  \
            if (j < n)                                                                                         \
                asm volatile("ld.v2.u64 {%0, %1}, [%2];"                                                       \
                             : "=l"(v[2 * j]), "=l"(v[2 * j + 1])                                              \
                             : "l"((const char *)(src) + 16ull * (i + j))                                      \
                             : "memory");                                                                      \
        }                                                                                                      \
        _Pragma("unroll") for (uint32_t j = 0; j < RV_LOADS_IN_FLIGHT; ++j) {                                  \
            if (j < n)                                                                                         \
                asm volatile("st.v2.u64 [%0], {%1, %2};" ::"l"((char *)(dst) + 16ull * (i + j)), "l"(v[2 * j]), \
                             "l"(v[2 * j + 1])                                                                 \
                             : "memory");                                                                      \
        }                                                                                                      \
    }
/* Not inlined: one copy of the unrolled batch, whose registers are not added to each caller's. */
__device__ __noinline__ static void rv_copy16(void *dst, const void *src, uint32_t units) {
    RV_COPY16_BATCHED(dst, src, units)
}
RV_FN void rv_zero16(void *dst, uint64_t units) {
    for (uint64_t i = 0; i < units; ++i)
        asm volatile("st.v2.u64 [%0], {%1, %1};" ::"l"((char *)dst + 16ull * i), "l"(0ull) : "memory");
}
/* Three relaxed system-scope loads and a copy out of a host cell (at most RV_LOADS_IN_FLIGHT units, plain loads
 * as rv_copy16_from_host's, below), every load issued before the first result is used: across PCIe one round
 * trip for all, where the words and then the cell cost two (a thread waits at the first use of a load in flight,
 * and ptxas may wait for all of them at a call). */
__device__ __noinline__ static void rv_load3_and_copy16_from_host(uint32_t words[3], const uint32_t *a,
                                                                  const uint32_t *b, const uint32_t *c, void *dst,
                                                                  const void *src, uint32_t units) {
    uint32_t x, y, z;
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(x) : "l"(a) : "memory");
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(y) : "l"(b) : "memory");
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(z) : "l"(c) : "memory");
    RV_COPY16_BATCHED(dst, src, units)
    words[0] = x;
    words[1] = y;
    words[2] = z;
}
#else
/* memcpy/memset: no aliasing assumptions about the structs they move (a cast to a 16-byte struct type would
 * let the compiler drop the stores that built the source), and 16-byte moves for aligned data. */
RV_FN void rv_copy16(void *dst, const void *src, uint32_t units) {
    if (rv_sim_thread) {
        struct rv_sim_copy_args a = {dst, src, 16ull * units};
        (void)rv_sim_hook(RV_SIM_COPY, &a, 0);
        return;
    }
    __builtin_memcpy(dst, src, 16ull * units);
}
RV_FN void rv_zero16(void *dst, uint64_t units) {
    if (rv_sim_thread) {
        struct rv_sim_copy_args a = {dst, 0, 16ull * units};
        (void)rv_sim_hook(RV_SIM_COPY, &a, 0);
        return;
    }
    __builtin_memset(dst, 0, 16ull * units);
}
/* As on the GPU: three relaxed loads and a cell's copy, in the emulated driver's cost model one round trip for the
 * batch and a read's turn for each further word (each load is counted). */
RV_FN void rv_load3_and_copy16_from_host(uint32_t words[3], const uint32_t *a, const uint32_t *b, const uint32_t *c,
                                         void *dst, const void *src, uint32_t units) {
    uint32_t latency = rv_host_sys_latency_ns;
    words[0] = rv_load_relaxed_u32(a);
    rv_host_sys_latency_ns = rv_host_sys_read_ns; /* issued with the first: each waits only its turn */
    words[1] = rv_load_relaxed_u32(b);
    words[2] = rv_load_relaxed_u32(c);
    rv_host_sys_latency_ns = latency;
    rv_copy16(dst, src, units);
}
#endif

/* A copy out of a cell the host wrote (a command, an inbox envelope), made after the acquire of its ring's index:
 * plain loads, as rv_copy16's (a bulk payload's were already). The host wrote the cell before it released that
 * index and rewrites it only after the device has released the cell back, so the loads race with no write: the
 * acquire, before them in program order, makes them see the cell it published (none is served from a cache line
 * of the cell's previous lap). Plain loads of one line are merged on the way to mapped memory, where volatile
 * ones went each as a read of its own: on an H200 the step's batch with an envelope read volatile took 6.2 µs,
 * plain 2.7 µs (docs/benchmarks.md). */
RV_FN void rv_copy16_from_host(void *dst, const void *src, uint32_t units) { rv_copy16(dst, src, units); }

/* Plain byte copies (no libc on the device). */
RV_FN void rv_copy_bytes(void *dst, const void *src, uint32_t n) {
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    for (uint32_t i = 0; i < n; ++i) d[i] = s[i];
}
RV_FN void rv_zero_bytes(void *dst, uint64_t n) {
    uint8_t *d = (uint8_t *)dst;
    for (uint64_t i = 0; i < n; ++i) d[i] = 0;
}

#endif /* RV_PORT_H */
