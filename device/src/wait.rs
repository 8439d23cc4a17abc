//! How host threads wait on the device: a [`Parker`] that never loses a wake-up, the adaptive
//! [`IdleBackoff`] of the executor's workers and the poller (spin, then yield, then park; never park in the
//! latency mode), and [`Retry`], the
//! bounded spin/yield/sleep loop of a producer waiting for room in a ring.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::busy_cores::YieldWatch;
use crate::sync::lock;

/// How a device's own host threads (the CPU backend's workers, the poller, the WebGPU executor) wait and are
/// scheduled, from its [`DeviceConfig`](crate::DeviceConfig).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostThreads {
    /// Never park when idle (the latency mode).
    pub(crate) latency_mode: bool,
    /// The time slice asked of the kernel for each thread ([`crate::thread_slice`]); `None`: the system's default.
    pub(crate) slice: Option<Duration>,
}

impl HostThreads {
    /// Called first by each such thread: asks for its slice.
    pub(crate) fn enter(&self) {
        if let Some(slice) = self.slice {
            if !crate::thread_slice::request_thread_slice(slice) {
                tracing::debug!(?slice, "the scheduler did not take the thread's slice; keeping the default");
            }
        }
    }
}

/// Wakes parked threads without losing a wake-up that races with parking.
pub(crate) struct Parker {
    epoch: AtomicU64,
    sleepers: AtomicU32,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Self { epoch: AtomicU64::new(0), sleepers: AtomicU32::new(0), lock: Mutex::new(()), cond: Condvar::new() }
    }

    /// The current epoch; pass it to [`Parker::park`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Sleeps up to `timeout` unless [`Parker::wake`] was called since `seen` was read.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))] // the wgpu executor's idle wait
    pub(crate) fn park(&self, seen: u64, timeout: Duration) {
        self.park_unless(seen, timeout, || false);
    }

    /// [`Parker::park`], unless `pending()` finds work. `pending` is asked after this thread counts as a
    /// sleeper, which is what lets a producer skip the wake-up when it sees no sleeper
    /// ([`Parker::wake_sleepers`]): either it sees this sleeper, or `pending` sees its work.
    pub(crate) fn park_unless(&self, seen: u64, timeout: Duration, pending: impl Fn() -> bool) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // pairs with the fence in wake_sleepers (a store-buffer pair on the work and on `sleepers`)
        fence(Ordering::SeqCst);
        let guard = lock(&self.lock);
        if self.epoch.load(Ordering::SeqCst) == seen && !pending() {
            let _ = self.cond.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the parked threads if there are any, after the caller published work that every parked thread
    /// looks for with the `pending` check of [`Parker::park_unless`]. With no sleeper it writes nothing: a
    /// thread about to park sees the work instead. (Threads that are only spinning or yielding find work on
    /// their next round without a wake-up.)
    pub(crate) fn wake_sleepers(&self) {
        // pairs with the fence in park_unless
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            self.wake();
        }
    }

    /// Wakes every parked thread, and makes the next `park` with an older epoch return at once.
    pub(crate) fn wake(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.lock);
            self.cond.notify_all();
        }
    }
}

/// Pauses of one spinning round of [`IdleBackoff`]: few, since the thread looks for work between two rounds
/// (a pause is about 10 ns on recent Intel cores: 32 of them made work that arrived wait 160 ns on average
/// before the look that found it).
const PAUSES_PER_SPIN: u32 = 8;

/// Adaptive backoff of a thread with nothing to do: spin, then yield, then park with a growing timeout (up to
/// `park_max`). Reset it whenever the thread finds work.
pub(crate) struct IdleBackoff {
    idle: u32,
    spin: u32,
    /// Rounds that yield after the spinning ones, before the thread parks.
    yields: u32,
    park_max: Duration,
    /// Past the spinning rounds, yield forever instead of parking (the latency mode), unless `watch` finds the
    /// cores busy.
    never_park: bool,
    /// The latency mode's record of its yields.
    watch: YieldWatch,
}

impl IdleBackoff {
    /// `spin` rounds that spin, as many that yield, then parks of up to `park_max`.
    pub(crate) fn new(spin: u32, park_max: Duration) -> Self {
        Self { idle: 0, spin, yields: spin, park_max, never_park: false, watch: YieldWatch::default() }
    }

    /// Sets the rounds that yield before the thread parks. Yielding keeps a thread as quick to find new work
    /// as spinning on an idle machine, and gives its core away on a busy one; spinning does not.
    pub(crate) fn yields(mut self, rounds: u32) -> Self {
        self.yields = rounds;
        self
    }

    /// With `latency_mode`, the thread never parks: after spinning it yields, so work that arrives while it
    /// is idle costs no wake-up (and the thread keeps a core busy). While most of its recent yields were slow
    /// (the cores are busy with threads that do not yield: see [`crate::busy_cores`]) it waits as without.
    pub(crate) fn latency_mode(mut self, latency_mode: bool) -> Self {
        self.never_park = latency_mode;
        self
    }

    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }

    /// One idle round; `seen` is the parker epoch read before the round's work.
    pub(crate) fn idle(&mut self, parker: &Parker, seen: u64) {
        self.idle_unless(parker, seen, || false);
    }

    /// [`IdleBackoff::idle`] for a thread whose producers wake it with [`Parker::wake_sleepers`]: it parks
    /// only if `pending()` finds no work (see [`Parker::park_unless`]).
    pub(crate) fn idle_unless(&mut self, parker: &Parker, seen: u64, pending: impl Fn() -> bool) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= self.spin {
            for _ in 0..PAUSES_PER_SPIN {
                std::hint::spin_loop();
            }
        } else if self.never_park && !self.watch.cores_busy() {
            self.watch.timed_yield();
        } else if self.idle <= self.spin.saturating_add(self.yields) {
            std::thread::yield_now();
        } else {
            let shift = (self.idle - self.spin - self.yields).min(16);
            let timeout = Duration::from_micros(50u64 << shift).min(self.park_max);
            parker.park_unless(seen, timeout, pending);
        }
    }
}

/// A producer waiting for room in a ring the device drains: yields for the first rounds, then sleeps `nap`
/// between checks, until a deadline.
pub(crate) struct Retry {
    rounds: u32,
    nap: Duration,
}

impl Retry {
    /// Rounds that yield before the waits start sleeping.
    const YIELD_ROUNDS: u32 = 64;

    pub(crate) fn new(nap: Duration) -> Self {
        Self { rounds: 0, nap }
    }

    /// Waits one round; false (without waiting) once `deadline` has passed.
    pub(crate) fn again(&mut self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return false;
        }
        self.rounds += 1;
        if self.rounds > Self::YIELD_ROUNDS {
            std::thread::sleep(self.nap);
        } else {
            std::thread::yield_now();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};

    /// Spins a pseudo-random 0..1024 rounds: moves the two threads' steps against each other, so the waker's
    /// publication lands in the sleeper's window between its last look and its park in many rounds.
    fn jitter(round: u32) {
        for _ in 0..(round.wrapping_mul(2_654_435_761) >> 22) {
            std::hint::spin_loop();
        }
    }

    /// A waker that publishes work and calls `wake_sleepers` never leaves a thread parked on it: each round
    /// the sleeper parks for an hour unless the work is seen, so a lost wake-up shows as a round that does
    /// not end (reported after 30 s instead of hanging the test).
    #[test]
    fn wake_sleepers_never_loses_a_sleeper_that_checks_for_work() {
        const ROUNDS: u32 = 20_000;
        let parker = Arc::new(Parker::new());
        let work = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel();
        let (p, w) = (parker.clone(), work.clone());
        let sleeper = std::thread::spawn(move || {
            for round in 0..ROUNDS {
                loop {
                    let seen = p.epoch();
                    if w.swap(false, Ordering::AcqRel) {
                        break;
                    }
                    jitter(round);
                    p.park_unless(seen, Duration::from_secs(3600), || w.load(Ordering::Acquire));
                }
                done_tx.send(()).expect("test alive");
            }
        });
        for round in 0..ROUNDS {
            jitter(round.rotate_left(7));
            work.store(true, Ordering::Release);
            parker.wake_sleepers();
            if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                panic!("round {round}: the sleeper stayed parked with work published");
            }
        }
        sleeper.join().expect("sleeper");
    }
}
