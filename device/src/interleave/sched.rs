//! The simulator's scheduler and memory model: one turn among the simulated threads, handed on only at the points
//! the device code and the host's shared-region layer reach (every access of the shared region, every
//! synchronising access of the local region, fences, pauses, copies); simulated clocks that move only with those
//! points; and the stores each thread made to the shared region that the others cannot see yet.
//!
//! The memory model: a store to the shared region lands in memory at once (so the thread that made it, which may
//! read it back with plain loads, always sees it), and is recorded as *pending* with the value it replaced.
//! Another thread's load of those bytes sees the replaced value until the record is drained. A release store, a
//! fence or a read-modify-write drains the thread's own records first (its earlier stores become visible before
//! it). Otherwise a store becomes visible at a moment the generator draws, up to `Policy::device_delay_ns` (a
//! device thread's, posted across PCIe) or `Policy::host_delay_ns` (a host thread's store buffer) after
//! it was made: a device thread's stores to different addresses in any order (PTX lets relaxed stores become
//! visible in any order), to the same bytes in order; a host thread's in the order they were made (x86-TSO: a
//! store buffer is first in, first out). Loads are not reordered, and the local region (device memory no host
//! thread reads) is sequentially consistent.
//!
//! Time: every thread has its own clock, moved by each of its points by that point's cost (a device thread's
//! access of the shared region costs a PCIe round trip, a host's a cache line; varied, and now and then held up,
//! by the generator), and the thread whose clock is earliest runs next. So the host gets through as many of its
//! points during one PCIe round trip of a block as it would on a machine, and a seed decides by how much each
//! thread is late.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::Thread;

/// A seeded generator (SplitMix64): every choice of a run comes from it, so a seed replays the run exactly.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True `per_mille` times in a thousand.
    pub(crate) fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

/// Which side of PCIe a simulated thread is on: it decides the order its stores become visible in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// A block of the persistent kernel (PTX's model).
    Device,
    /// A host thread (x86-TSO).
    Host,
}

/// A store another thread may not see yet: `len` bytes at `addr` held `old` before it, until `visible_ns`.
#[derive(Clone, Copy, Debug)]
struct Pending {
    thread: usize,
    visible_ns: u64,
    addr: usize,
    len: usize,
    old: u64,
}

/// What a point is, for its cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cost {
    /// An access of the shared region (across PCIe for a device thread).
    Shared,
    /// Anything else: a local-region access, a fence.
    Other,
}

/// How a run is timed (chosen from its seed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    /// A device thread's access of the shared region (a PCIe round trip), simulated ns.
    pub device_shared_ns: u64,
    /// A host thread's access of the shared region (a cache line of host memory), simulated ns.
    pub host_shared_ns: u64,
    /// Every other point, simulated ns.
    pub other_ns: u64,
    /// Each cost varies by up to this many percent either way.
    pub jitter_percent: u64,
    /// Chance (per mille) that a point is held up (a host thread preempted, a block's memory access queued).
    pub stall_per_mille: u32,
    /// Longest such hold-up, simulated ns.
    pub stall_ns: u64,
    /// Longest a device thread's store stays invisible to the other threads, simulated ns.
    pub device_delay_ns: u64,
    /// Longest a host thread's store stays invisible to the other threads, simulated ns.
    pub host_delay_ns: u64,
    /// Most pending stores one thread may hold (a store buffer's size); the oldest becomes visible past it.
    pub buffer: usize,
    /// Points after which the run is stopped as one that does not end.
    pub point_limit: u64,
}

struct State {
    rng: Rng,
    /// Each thread's own clock: the thread with the earliest runs next.
    clocks: Vec<u64>,
    done: Vec<bool>,
    /// Threads that never run again (a device lost between two of its accesses).
    frozen: Vec<bool>,
    sides: Vec<Side>,
    pending: Vec<Pending>,
    /// When a host thread's last store becomes visible (its stores become visible in order).
    last_visible: Vec<u64>,
    points: u64,
    over_limit: bool,
    /// The last points (thread, what, clock), for a failure's report.
    recent: std::collections::VecDeque<(usize, &'static str, u64)>,
}

/// Points kept for a failure's report.
const RECENT_POINTS: usize = 64;

/// No thread holds the turn (all are done).
const NOBODY: usize = usize::MAX;

/// The scheduler of one run.
pub(crate) struct Scheduler {
    state: Mutex<State>,
    turn: AtomicUsize,
    /// Set once the run is over: the threads left (frozen ones) run freely to their end, unscheduled.
    free_run: AtomicBool,
    handles: Mutex<Vec<Option<Thread>>>,
    policy: Policy,
    shared: (usize, usize),
    names: Vec<&'static str>,
}

impl Scheduler {
    /// A scheduler for threads of the given sides and names, over a shared region at `shared` (start, length).
    pub(crate) fn new(seed: u64, policy: Policy, threads: &[(Side, &'static str)], shared: (usize, usize)) -> Self {
        Self {
            state: Mutex::new(State {
                rng: Rng::new(seed),
                clocks: vec![0; threads.len()],
                done: vec![false; threads.len()],
                frozen: vec![false; threads.len()],
                sides: threads.iter().map(|t| t.0).collect(),
                pending: Vec::new(),
                last_visible: vec![0; threads.len()],
                points: 0,
                over_limit: false,
                recent: Default::default(),
            }),
            turn: AtomicUsize::new(NOBODY),
            free_run: AtomicBool::new(false),
            handles: Mutex::new(vec![None; threads.len()]),
            policy,
            shared,
            names: threads.iter().map(|t| t.1).collect(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Thread `me`'s clock: simulated nanoseconds since the run began.
    pub(crate) fn now_ns(&self, me: usize) -> u64 {
        self.state().clocks[me]
    }

    /// The latest clock of any thread (how long the run took).
    pub(crate) fn elapsed_ns(&self) -> u64 {
        self.state().clocks.iter().copied().max().unwrap_or(0)
    }

    /// Points so far.
    pub(crate) fn points(&self) -> u64 {
        self.state().points
    }

    /// Whether the run went past its point limit.
    pub(crate) fn over_limit(&self) -> bool {
        self.state().over_limit
    }

    /// The last points before now, oldest first, as lines for a report.
    pub(crate) fn recent(&self) -> Vec<String> {
        let st = self.state();
        st.recent.iter().map(|(t, what, ns)| format!("{:>10} ns  {:<7} {what}", ns, self.names[*t])).collect()
    }

    /// Registers the calling thread as simulated thread `me`; returns once it holds the turn.
    pub(crate) fn register(&self, me: usize) {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())[me] = Some(std::thread::current());
        self.wait_turn(me);
    }

    /// Whether every thread has registered.
    pub(crate) fn all_registered(&self) -> bool {
        self.handles.lock().unwrap_or_else(|p| p.into_inner()).iter().all(Option::is_some)
    }

    /// Gives the first turn (every thread registered).
    pub(crate) fn start(&self) {
        let first = {
            let mut st = self.state();
            let n = st.clocks.len() as u64;
            st.rng.below(n) as usize
        };
        self.hand_to(first);
    }

    fn hand_to(&self, next: usize) {
        self.turn.store(next, Ordering::Release);
        if next != NOBODY {
            if let Some(t) = &self.handles.lock().unwrap_or_else(|p| p.into_inner())[next] {
                t.unpark();
            }
        }
    }

    fn wait_turn(&self, me: usize) {
        while self.turn.load(Ordering::Acquire) != me && !self.free_run.load(Ordering::Acquire) {
            std::thread::park();
        }
    }

    /// Freezes every thread of `side` where it stands (between two of its accesses): none of them runs again
    /// while the run lasts. Called by the thread holding the turn.
    pub(crate) fn freeze(&self, side: Side) {
        let mut st = self.state();
        for t in 0..st.sides.len() {
            st.frozen[t] |= st.sides[t] == side;
        }
    }

    /// Ends the run for the threads still in it (frozen ones): from now on they run freely, unscheduled, to
    /// their end (the caller has asked the grid to terminate).
    pub(crate) fn release_frozen(&self) {
        if self.state().frozen.iter().any(|&f| f) {
            self.run_free();
        }
    }

    /// Ends scheduling for every thread still in the run: they run freely, unscheduled, to their end (after the
    /// host's side of a run panicked, with the grid asked to terminate).
    pub(crate) fn run_free(&self) {
        self.free_run.store(true, Ordering::Release);
        for t in self.handles.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten() {
            t.unpark();
        }
    }

    /// The thread whose clock is earliest (ties broken by the generator); NOBODY when every thread is done.
    fn pick(st: &mut State) -> usize {
        let live = (0..st.clocks.len()).filter(|&t| !st.done[t] && !st.frozen[t]);
        let Some(earliest) = live.clone().map(|t| st.clocks[t]).min() else { return NOBODY };
        let tied: Vec<usize> = live.filter(|&t| st.clocks[t] == earliest).collect();
        tied[st.rng.below(tied.len() as u64) as usize]
    }

    fn pass_turn(&self, me: usize, next: usize) {
        if next != me {
            self.hand_to(next);
            self.wait_turn(me);
        }
    }

    /// A point of thread `me`: its clock moves by the point's cost (varied by the generator), and the turn
    /// passes to the thread whose clock is then earliest (returns once `me` holds it again). `what` names the
    /// point for a failure's report.
    pub(crate) fn point(&self, me: usize, what: &'static str, cost: Cost) {
        if self.free_run.load(Ordering::Acquire) {
            return;
        }
        let next = {
            let mut st = self.state();
            st.points += 1;
            if st.points > self.policy.point_limit {
                st.over_limit = true;
            }
            let p = &self.policy;
            let base = match (cost, st.sides[me]) {
                (Cost::Shared, Side::Device) => p.device_shared_ns,
                (Cost::Shared, Side::Host) => p.host_shared_ns,
                (Cost::Other, _) => p.other_ns,
            };
            let spread = base * p.jitter_percent / 100;
            let mut ns = base - spread + st.rng.below(2 * spread + 1);
            if st.rng.chance(p.stall_per_mille) {
                ns += st.rng.below(p.stall_ns + 1);
            }
            st.clocks[me] += ns.max(1);
            if st.recent.len() == RECENT_POINTS {
                st.recent.pop_front();
            }
            let clock = st.clocks[me];
            st.recent.push_back((me, what, clock));
            Self::pick(&mut st)
        };
        self.pass_turn(me, next);
    }

    /// Thread `me` sleeps `ns` of simulated time (a pause of the device code, a host that waits).
    pub(crate) fn sleep(&self, me: usize, ns: u64) {
        if self.free_run.load(Ordering::Acquire) {
            std::thread::yield_now();
            return;
        }
        let next = {
            let mut st = self.state();
            st.clocks[me] += ns.max(1);
            Self::pick(&mut st)
        };
        self.pass_turn(me, next);
    }

    /// Thread `me` has ended: its stores become visible and the turn passes on.
    pub(crate) fn finish(&self, me: usize) {
        let next = {
            let mut st = self.state();
            st.done[me] = true;
            st.pending.retain(|p| p.thread != me);
            Self::pick(&mut st)
        };
        self.hand_to(next);
    }

    fn in_shared(&self, addr: usize, len: usize) -> bool {
        addr >= self.shared.0 && addr + len <= self.shared.0 + self.shared.1
    }

    /// Forgets the pending stores that are visible by thread `me`'s clock.
    fn drain_visible(st: &mut State, me: usize) {
        let now = st.clocks[me];
        st.pending.retain(|p| p.visible_ns > now);
    }

    /// Drains every pending store of thread `me` (a release, a fence, a read-modify-write).
    fn drain_own(st: &mut State, me: usize) {
        st.pending.retain(|p| p.thread != me);
    }

    /// Before a read-modify-write or release of thread `me` on memory outside the simulated stores' reach (the
    /// local region, or a host-side word the caller then updates): its earlier stores become visible first.
    pub(crate) fn release(&self, me: usize) {
        Self::drain_own(&mut self.state(), me);
    }

    /// A load of one field of `len` (at most 8) bytes at `src` by thread `me`: a point named `what`, then the value
    /// as `me` may see it.
    ///
    /// # Safety
    /// `src` must be a live, aligned field of `len` bytes, written only by the thread holding the turn.
    pub(crate) unsafe fn load(&self, me: usize, what: &'static str, src: *const u8, len: usize) -> u64 {
        self.point(me, what, Cost::Shared);
        let mut v = 0u64;
        // SAFETY: the caller's guarantee; `v` has 8 bytes and len is at most 8.
        unsafe { self.read(me, &mut v as *mut u64 as *mut u8, src, len.min(8)) };
        v
    }

    /// A store of `value` into one field of `len` (at most 8) bytes at `dst` by thread `me`: a point named `what`,
    /// then the store ([`Self::write`]).
    ///
    /// # Safety
    /// As for [`Self::load`].
    pub(crate) unsafe fn store(
        &self,
        me: usize,
        what: &'static str,
        dst: *mut u8,
        len: usize,
        value: u64,
        release: bool,
    ) {
        self.point(me, what, Cost::Shared);
        // SAFETY: the caller's guarantee; `value` has 8 bytes and len is at most 8.
        unsafe { self.write(me, dst, &value as *const u64 as *const u8, len.min(8), release) };
    }

    /// Reads `len` bytes at `src` into `dst` as thread `me` may see them: memory, with the bytes of other
    /// threads' pending stores replaced by what they held before.
    ///
    /// # Safety
    /// Both ranges must be valid for `len` bytes, and only the thread holding the turn writes the memory.
    pub(crate) unsafe fn read(&self, me: usize, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller guarantees both ranges; no other simulated thread runs while `me` holds the turn.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        if !self.in_shared(src as usize, len) {
            return;
        }
        let mut st = self.state();
        Self::drain_visible(&mut st, me);
        // latest first, so the oldest pending store's old bytes are what is left
        for p in st.pending.iter().rev().filter(|p| p.thread != me) {
            let (lo, hi) = (p.addr.max(src as usize), (p.addr + p.len).min(src as usize + len));
            for a in lo..hi {
                let byte = p.old.to_ne_bytes()[a - p.addr];
                // SAFETY: a lies inside [src, src + len), so a - src is inside dst's range.
                unsafe { *dst.add(a - src as usize) = byte };
            }
        }
    }

    /// Writes `len` bytes (from `src`, or zeros when `src` is null) to `dst` as thread `me`: into memory at once,
    /// and, in the shared region, recorded as pending in 8-byte (or smaller) pieces. `release` drains the
    /// thread's earlier stores first.
    ///
    /// # Safety
    /// Both ranges must be valid for `len` bytes, `dst` aligned to the pieces' sizes (4 or 8 bytes, or 8-byte
    /// pieces for a copy), and only the thread holding the turn writes the memory.
    pub(crate) unsafe fn write(&self, me: usize, dst: *mut u8, src: *const u8, len: usize, release: bool) {
        let mut st = self.state();
        Self::drain_visible(&mut st, me);
        if release {
            Self::drain_own(&mut st, me);
        }
        let shared = self.in_shared(dst as usize, len);
        let now = st.clocks[me];
        let mut at = 0;
        while at < len {
            let piece = (len - at).min(8);
            let mut old = 0u64;
            // SAFETY: dst + at .. + piece lies inside dst's range (the caller's guarantee).
            unsafe {
                std::ptr::copy_nonoverlapping(dst.add(at), &mut old as *mut u64 as *mut u8, piece);
                if src.is_null() {
                    std::ptr::write_bytes(dst.add(at), 0, piece);
                } else {
                    std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), piece);
                }
            }
            if shared {
                let addr = dst as usize + at;
                let delay = match st.sides[me] {
                    Side::Device => self.policy.device_delay_ns,
                    Side::Host => self.policy.host_delay_ns,
                };
                let mut visible_ns = now + st.rng.below(delay + 1);
                visible_ns = match st.sides[me] {
                    // in the order made
                    Side::Host => visible_ns.max(st.last_visible[me]),
                    // in any order, but not before an earlier store of this thread to the same bytes
                    Side::Device => st
                        .pending
                        .iter()
                        .filter(|q| q.thread == me && q.addr < addr + piece && addr < q.addr + q.len)
                        .map(|q| q.visible_ns)
                        .fold(visible_ns, u64::max),
                };
                st.last_visible[me] = visible_ns;
                st.pending.push(Pending { thread: me, visible_ns, addr, len: piece, old });
                if st.pending.iter().filter(|p| p.thread == me).count() > self.policy.buffer {
                    let oldest = st.pending.iter().position(|p| p.thread == me).expect("counted above");
                    st.pending.remove(oldest);
                }
            }
            at += piece;
        }
    }
}
