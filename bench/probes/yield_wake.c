// A probe of the scheduler behaviour that made ringvisor's hand-offs take 3-4 ms beside busy cores
// (docs/benchmarks.md, "After the thread slices and the shared worker pool"). Two threads hand a value back and
// forth through a condition variable, 2,000 times, after 200 µs idle each; the waiting thread first yields up to
// YIELDS times (as ringvisor's idle threads do) before it parks. With SHORT=1 both ask for 100 µs time slices
// (sched_setattr, Linux 6.12+). Run it beside one busy thread per core:
//   gcc -O2 -pthread yield_wake.c -o yield_wake && gcc -O2 -pthread -x c - -o burn <<<'
//     #include <pthread.h>
//     #include <unistd.h>
//     static void* spin(void* x) { volatile long i = 0; for (;;) i++; }
//     int main() { pthread_t t; for (int k = 0; k < 2; k++) pthread_create(&t, 0, spin, 0); sleep(60); }'
//   ./burn & ./yield_wake 0 64; ./yield_wake 1 64; kill %1
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sched_attr { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t prio; uint64_t runtime, deadline, period; };

static int short_slice, yields;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static long v = 0;

static void set_slice(void) {
    if (!short_slice) return;
    struct sched_attr a = {0};
    a.size = 48;
    a.nice = getpriority(PRIO_PROCESS, 0);
    a.runtime = 100000;
    if (syscall(SYS_sched_setattr, 0, &a, 0)) perror("sched_setattr");
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void* peer(void* unused) {
    (void)unused;
    set_slice();
    for (long i = 0;; i++) {
        for (int k = 0; k < yields && __atomic_load_n(&v, __ATOMIC_ACQUIRE) != 2 * i + 1; k++) sched_yield();
        pthread_mutex_lock(&m);
        while (v != 2 * i + 1) pthread_cond_wait(&c, &m);
        v = 2 * i + 2;
        pthread_cond_broadcast(&c);
        pthread_mutex_unlock(&m);
    }
    return 0;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
    short_slice = argc > 1 ? atoi(argv[1]) : 0;
    yields = argc > 2 ? atoi(argv[2]) : 64;
    set_slice();
    pthread_t t;
    pthread_create(&t, 0, peer, 0);
    enum { N = 2000 };
    static double s[N];
    for (int i = 0; i < N; i++) {
        usleep(200);
        double t0 = now();
        pthread_mutex_lock(&m);
        v = 2 * i + 1;
        pthread_cond_broadcast(&c);
        while (v != 2 * i + 2) pthread_cond_wait(&c, &m);
        pthread_mutex_unlock(&m);
        s[i] = now() - t0;
    }
    qsort(s, N, sizeof(double), cmp);
    printf("short slice %d, %d yields: p50 %.1f us, p90 %.1f us\n", short_slice, yields, s[N / 2] / 1e3, s[N * 9 / 10] / 1e3);
    return 0;
}
