//! How host threads wait on the device: a [`Parker`] that never loses a wake-up, the adaptive
//! [`IdleBackoff`] of the executor's workers and the poller (spin, then yield, then park; never park in the
//! latency mode), and [`Retry`], the
//! bounded spin/yield/sleep loop of a producer waiting for room in a ring.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
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
    /// A sender's wake-up ([`Parker::wake_sleepers_after_seq_cst_mark`]) is under way: the senders after it need
    /// not wake the same sleepers again. Cleared by each thread before it checks for work and parks.
    woken: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            sleepers: AtomicU32::new(0),
            woken: AtomicBool::new(false),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
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
    /// ([`Parker::wake_sleepers_after_seq_cst_mark`]): either it sees this sleeper, or `pending` sees its work.
    pub(crate) fn park_unless(&self, seen: u64, timeout: Duration, pending: impl Fn() -> bool) {
        // the next sender's mark wakes this thread (see wake_sleepers_after_seq_cst_mark); cleared before the
        // count and the check below, so a sender that still saw it set marked before this check
        self.woken.store(false, Ordering::SeqCst);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // a store-buffer pair with the waker's mark and its load of `sleepers` (wake_sleepers_after_seq_cst_mark)
        fence(Ordering::SeqCst);
        let guard = lock(&self.lock);
        if self.epoch.load(Ordering::SeqCst) == seen && !pending() {
            let _ = self.cond.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the parked threads if there are any, after the caller published work that every parked thread
    /// looks for with the `pending` check of [`Parker::park_unless`], its publication ending with a sequentially
    /// consistent read-modify-write of the word that check loads (`rv_cpu_mark_work`'s marks). With no sleeper it
    /// writes nothing: a thread about to park sees the work instead. (Threads that are only spinning or yielding
    /// find work on their next round without a wake-up.) A sequentially consistent load of the sleeper count, no
    /// fence (an `mfence` on x86, on a latency-mode call's write). Sound by the C++20 rules of the single total
    /// order S (the language's model, which Rust adopts): were this load to miss a sleeper's increment, it would
    /// precede that increment in S, and so would the mark; the sleeper's fence follows its increment in S, hence
    /// the mark precedes the fence in S, and the sleeper's `pending` load, sequenced after the fence, sees the mark.
    ///
    /// One wake-up per sleep, not one per sender: a sender that finds another's wake-up under way (`woken`, set by
    /// the sender that woke, cleared by each thread before it counts itself and checks for work) writes nothing.
    /// Sound by the same order: if this load of `woken` precedes a sleeper's clearing in S, so does the mark, and
    /// the sleeper's `pending` load after it sees the mark; if it follows the clearing, the `true` it read was
    /// stored after it by a sender whose wake-up then moves the epoch the sleeper read before it parks. Without
    /// it, a producer sending to an idle pool's worker paid a system call on every send while the worker was
    /// parked, and a flood of sends settled at 3 M/s where it ran at 20 (docs/benchmarks.md, session 18).
    pub(crate) fn wake_sleepers_after_seq_cst_mark(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0
            && !self.woken.load(Ordering::SeqCst)
            && !self.woken.swap(true, Ordering::SeqCst)
        {
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

/// How long the pauses of one spinning round of [`IdleBackoff`] last: short, since the thread looks for work
/// between two rounds (work that arrives waits half a round on average before the look that finds it).
const SPIN_ROUND_NS: f64 = 60.0;

/// Pauses per spinning round: [`SPIN_ROUND_NS`] of them, timed once per process. What a pause costs differs by
/// an order of magnitude between processors: about 10 ns on the Intel Xeons these figures were first taken on,
/// 22 ns on an AMD EPYC (Zen 5), where the fixed 8 pauses per round made a round 180 ns.
fn pauses_per_spin() -> u32 {
    static PAUSES: OnceLock<u32> = OnceLock::new();
    *PAUSES.get_or_init(|| pauses_for(fastest_pause_ns()))
}

/// The pauses that last [`SPIN_ROUND_NS`] when one lasts `pause_ns`: 1 to 16.
fn pauses_for(pause_ns: f64) -> u32 {
    if !pause_ns.is_finite() || pause_ns <= 0.0 {
        return 8;
    }
    (SPIN_ROUND_NS / pause_ns).round().clamp(1.0, 16.0) as u32
}

/// A pause's cost in nanoseconds: the fastest of three timed runs (a run the scheduler interrupted reads long).
fn fastest_pause_ns() -> f64 {
    const PAUSES: u32 = 512;
    (0..3)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..PAUSES {
                std::hint::spin_loop();
            }
            started.elapsed().as_nanos() as f64 / f64::from(PAUSES)
        })
        .fold(f64::INFINITY, f64::min)
}

/// A latency-mode thread that spins gives its core away once every this many spinning rounds (about 1 to 6 µs:
/// a round is one pause and the thread's look for work; a CPU worker's watch of a slot counts its pauses as
/// rounds). Its spinning right after work kept a thread it had just woken (through the work it did: an event read,
/// a reply) off the core for the whole spin: the woken thread's wake-up does not preempt a thread of the device's
/// short slice. On the 2-core development VM a latency-mode restart's device and tree parts took 61 µs together
/// (median of eight alternated runs), 27 µs with this (of eleven). The count runs on across the work the thread
/// finds (`reset` leaves it), so a thread busy in short bursts, a call loop's worker, also makes way now and then:
/// latency-mode calls measured the same (`latency_probe`). A yield hands the core over only to a thread the
/// scheduler deems owed it (docs/benchmarks.md: some woken threads still wait for the spinning thread's slice).
const LATENCY_MODE_YIELD_EVERY: u32 = 64;

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
    /// Spinning rounds since the thread last gave its core away (the latency mode's, see
    /// [`LATENCY_MODE_YIELD_EVERY`]).
    since_yield: u32,
}

impl IdleBackoff {
    /// `spin` rounds that spin, as many that yield, then parks of up to `park_max`.
    pub(crate) fn new(spin: u32, park_max: Duration) -> Self {
        Self { idle: 0, spin, yields: spin, park_max, never_park: false, watch: YieldWatch::default(), since_yield: 0 }
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
    /// Its spinning rounds are a single pause each, and there are as many more of them (the spinning lasts at least
    /// as long: a round's look for work is not shorter): the thread has a core to itself by the mode's contract,
    /// and work that arrives waits half a round on average. Once every [`LATENCY_MODE_YIELD_EVERY`] of them it
    /// yields instead, for a thread its work woke.
    pub(crate) fn latency_mode(mut self, latency_mode: bool) -> Self {
        self.never_park = latency_mode;
        self
    }

    /// The rounds that spin: `spin`, or in the latency mode as many more as a round of the other threads has
    /// pauses (its rounds are one pause each).
    fn spin_rounds(&self) -> u32 {
        if self.never_park {
            self.spin.saturating_mul(pauses_per_spin())
        } else {
            self.spin
        }
    }

    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }

    /// Pauses the spinning rounds have left before the thread yields (0 once past them).
    pub(crate) fn spinning_pauses_left(&self) -> u32 {
        self.spin_rounds().saturating_sub(self.idle).saturating_mul(self.pauses_per_round())
    }

    /// `pauses` of the spinning rounds spent elsewhere (a CPU worker watching a slot): counted as rounds.
    pub(crate) fn spun_pauses(&mut self, pauses: u32) {
        let rounds = pauses.div_ceil(self.pauses_per_round());
        self.idle = self.idle.saturating_add(rounds);
        self.since_yield = self.since_yield.saturating_add(rounds);
    }

    /// Pauses per spinning round: one in the latency mode (see [`IdleBackoff::latency_mode`]).
    fn pauses_per_round(&self) -> u32 {
        if self.never_park {
            1
        } else {
            pauses_per_spin()
        }
    }

    /// Whether this spinning round gives the core away instead of pausing: in the latency mode, once every
    /// [`LATENCY_MODE_YIELD_EVERY`] rounds.
    fn spinning_round_yields(&mut self) -> bool {
        if !self.never_park {
            return false;
        }
        self.since_yield = self.since_yield.saturating_add(1);
        let due = self.since_yield >= LATENCY_MODE_YIELD_EVERY;
        if due {
            self.since_yield = 0;
        }
        due
    }

    /// Whether the idle rounds have passed the spinning ones: the last round yielded or parked.
    pub(crate) fn past_spinning(&self) -> bool {
        self.idle > self.spin_rounds()
    }

    /// Whether this thread may park when idle: always, unless it is in the latency mode and has not found the
    /// cores busy lately (read without the clock: a watch that found them busy counts until it looks again).
    pub(crate) fn may_park(&self) -> bool {
        !self.never_park || self.watch.found_busy()
    }

    /// One idle round; `seen` is the parker epoch read before the round's work.
    pub(crate) fn idle(&mut self, parker: &Parker, seen: u64) {
        self.idle_unless(parker, seen, || false);
    }

    /// [`IdleBackoff::idle`] for a thread whose producers wake it with
    /// [`Parker::wake_sleepers_after_seq_cst_mark`]: it parks only if `pending()` finds no work (see
    /// [`Parker::park_unless`]).
    pub(crate) fn idle_unless(&mut self, parker: &Parker, seen: u64, pending: impl Fn() -> bool) {
        self.idle = self.idle.saturating_add(1);
        let spin = self.spin_rounds();
        if self.idle <= spin {
            if self.spinning_round_yields() {
                std::thread::yield_now();
            } else {
                for _ in 0..self.pauses_per_round() {
                    std::hint::spin_loop();
                }
            }
        } else if self.never_park && !self.watch.cores_busy() {
            self.watch.timed_yield();
        } else if self.idle <= spin.saturating_add(self.yields) {
            std::thread::yield_now();
        } else {
            let shift = (self.idle - spin - self.yields).min(16);
            let timeout = Duration::from_micros(50u64 << shift).min(self.park_max);
            parker.park_unless(seen, timeout, pending);
        }
    }
}

/// A call's clock, read only when something needs it: the deadline lies `timeout` after the first read. A call
/// answered before it looks at the clock reads it not at all (about 22 ns a read on the development VM, a twentieth
/// of a latency-mode call); its window then starts a few hundred nanoseconds late, at most.
pub(crate) struct CallClock {
    timeout: Duration,
    started: Option<Instant>,
}

impl CallClock {
    /// A clock not read yet, for a wait of `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self { timeout, started: None }
    }

    /// A clock read now, for a wait until `deadline`.
    pub(crate) fn until(deadline: Instant) -> Self {
        let now = Instant::now();
        Self { timeout: deadline.saturating_duration_since(now), started: Some(now) }
    }

    /// When the wait started: its first read of the clock, `now` if this is it.
    pub(crate) fn started_at(&mut self, now: Instant) -> Instant {
        *self.started.get_or_insert(now)
    }

    /// The wait's deadline (the clock read if it has not been).
    pub(crate) fn deadline(&mut self) -> Instant {
        crate::clock::deadline_from(*self.started.get_or_insert_with(Instant::now), self.timeout)
    }

    /// What is left of the wait.
    pub(crate) fn left(&mut self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
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

    /// A round's pauses last about `SPIN_ROUND_NS` whatever a pause costs, within 1 to 16 pauses; a timing that
    /// makes no sense falls back to 8.
    #[test]
    fn a_spinning_round_has_pauses_for_its_length_whatever_a_pause_costs() {
        assert_eq!(pauses_for(10.0), 6);
        assert_eq!(pauses_for(22.5), 3);
        assert_eq!(pauses_for(1.0), 16, "at most 16");
        assert_eq!(pauses_for(500.0), 1, "at least 1");
        assert_eq!(pauses_for(0.0), 8);
        assert_eq!(pauses_for(f64::NAN), 8);
        assert!((1..=16).contains(&pauses_per_spin()), "this machine's: {}", pauses_per_spin());
    }

    /// A latency-mode thread's spinning gives the core away once every `LATENCY_MODE_YIELD_EVERY` rounds, the
    /// rounds a watch spent counted; the default mode's spinning never does (it yields and parks after it).
    #[test]
    fn latency_mode_spinning_yields_every_so_many_rounds_and_the_default_modes_does_not() {
        let mut latency = IdleBackoff::new(32, Duration::from_millis(1)).latency_mode(true);
        let yielded: Vec<u32> =
            (1..=3 * LATENCY_MODE_YIELD_EVERY).filter(|_| latency.spinning_round_yields()).collect();
        let every = LATENCY_MODE_YIELD_EVERY;
        assert_eq!(yielded, [every, 2 * every, 3 * every]);
        latency.spun_pauses(LATENCY_MODE_YIELD_EVERY - 1); // a watch's pauses, one round each
        assert!(latency.spinning_round_yields(), "the watch's rounds count");
        assert!(!latency.spinning_round_yields(), "and the count starts over");
        let mut default = IdleBackoff::new(32, Duration::from_millis(1));
        default.spun_pauses(10 * LATENCY_MODE_YIELD_EVERY);
        assert!((0..10 * LATENCY_MODE_YIELD_EVERY).all(|_| !default.spinning_round_yields()));
    }

    /// The latency mode spins in rounds of one pause, as many more of them as a round of the other threads has
    /// pauses (the spinning lasts at least as long); turning it off again restores the rounds.
    #[test]
    fn the_latency_mode_spins_in_rounds_of_one_pause_and_as_many_more_rounds() {
        let normal = IdleBackoff::new(32, Duration::from_millis(1));
        let fast = IdleBackoff::new(32, Duration::from_millis(1)).latency_mode(true);
        assert_eq!(fast.spin_rounds(), 32 * pauses_per_spin());
        assert!(fast.never_park && !normal.never_park);
        assert_eq!(normal.spin_rounds(), 32);
        assert_eq!(
            fast.latency_mode(true).spin_rounds(),
            32 * pauses_per_spin(),
            "turning it on twice changes nothing"
        );
        let off = IdleBackoff::new(32, Duration::from_millis(1)).latency_mode(true).latency_mode(false);
        assert_eq!((off.spin_rounds(), off.never_park), (32, false));
    }

    /// Spins a pseudo-random 0..1024 rounds: moves the two threads' steps against each other, so the waker's
    /// publication lands in the sleeper's window between its last look and its park in many rounds.
    fn jitter(round: u32) {
        for _ in 0..(round.wrapping_mul(2_654_435_761) >> 22) {
            std::hint::spin_loop();
        }
    }

    /// A waker that publishes work with a sequentially consistent read-modify-write and calls
    /// `wake_sleepers_after_seq_cst_mark` never leaves a thread parked on it: each round the sleeper parks for an
    /// hour unless the work is seen, so a lost wake-up shows as a round that does not end (reported after 30 s
    /// instead of hanging the test).
    #[test]
    fn a_wake_after_a_seq_cst_mark_never_loses_a_sleeper_that_checks_for_work() {
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
            work.swap(true, Ordering::SeqCst);
            parker.wake_sleepers_after_seq_cst_mark();
            if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                panic!("round {round}: the sleeper stayed parked with work published");
            }
        }
        sleeper.join().expect("sleeper");
    }

    /// Several senders, each publishing work and calling `wake_sleepers_after_seq_cst_mark` without waiting for it
    /// to be taken, so that most find another's wake-up under way and skip theirs: two sleepers, each parking for
    /// an hour unless it sees work, still take every unit (a lost wake-up shows as units left after 30 s).
    #[test]
    fn senders_that_skip_a_wake_up_under_way_never_strand_a_sleeper() {
        const SENDERS: u32 = 3;
        const UNITS: u32 = 20_000;
        let parker = Arc::new(Parker::new());
        let work = Arc::new(AtomicU32::new(0));
        let taken = Arc::new(AtomicU32::new(0));
        let total = SENDERS * UNITS;
        let sleepers: Vec<_> = (0..2u32)
            .map(|k| {
                let (p, w, t) = (parker.clone(), work.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut round = k;
                    while t.load(Ordering::Acquire) < total {
                        let seen = p.epoch();
                        let got = w.swap(0, Ordering::AcqRel);
                        if got != 0 {
                            t.fetch_add(got, Ordering::AcqRel);
                            continue;
                        }
                        round = round.wrapping_add(1);
                        jitter(round);
                        p.park_unless(seen, Duration::from_secs(3600), || {
                            w.load(Ordering::Acquire) != 0 || t.load(Ordering::Acquire) >= total
                        });
                    }
                })
            })
            .collect();
        let senders: Vec<_> = (0..SENDERS)
            .map(|k| {
                let (p, w) = (parker.clone(), work.clone());
                std::thread::spawn(move || {
                    for unit in 0..UNITS {
                        jitter(unit.rotate_left(5 + k));
                        w.fetch_add(1, Ordering::SeqCst);
                        p.wake_sleepers_after_seq_cst_mark();
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().expect("sender");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while taken.load(Ordering::Acquire) < total {
            assert!(
                Instant::now() < deadline,
                "{} of {total} units taken after 30 s: a sleeper stayed parked with work published",
                taken.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // the last unit's taker ends its loop; the other sleeper may be parked: wake it to leave
        parker.wake();
        for s in sleepers {
            s.join().expect("sleeper");
        }
    }
}
