//! The poller: one host thread per device reads the event ring and the outboxes and routes what it finds
//! (command outcomes to their waiters, replies to calls or [`Device::replies`], events to subscribers). A
//! thread waiting for an answer polls in its place for a short while, so the answer does not wait for the
//! poller thread to wake.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::messages::CallWait;
use super::outbox::{OutboxCursor, OwnReply};
use super::DeviceInner;
use crate::backend::HostSide;
use crate::error::DeviceError;
use crate::message::Reply;
use crate::sync::Completion;
use crate::sync::OwnLine;
use crate::thread_slice::LentSlice;
use crate::wait::{CallClock, HostThreads, IdleBackoff, Parker};

/// Where the host has read the event ring and each outbox up to.
pub(super) struct PollState {
    pub(super) sweep: Vec<u32>,
    /// Each slot's outbox: read up to, and released to the device up to.
    pub(super) outboxes: Vec<OutboxCursor>,
    /// Slots whose outbox starts with a routed message waiting for room in its target's inbox, and since when.
    pub(super) held: Vec<(u32, Instant)>,
    pub(super) event_head: u32,
    /// Block 0's heartbeat, commands processed and events published, as last seen (any of them moving is a
    /// sign of life).
    pub(super) progress: (u64, u64, u64),
    /// When to look at block 0's heartbeat next (time since the device opened).
    pub(super) next_beat_check: Duration,
}

/// How long a thread waiting for a reply polls the device itself before it sleeps.
pub(super) const ASSIST_SPIN: Duration = Duration::from_micros(50);
/// For how much of [`ASSIST_SPIN`] it polls without giving up its core: past this, it yields between polls, so
/// that on a machine whose cores are busy the threads that produce the answer (a CPU backend's worker, the
/// poller) get the core it would spin on (an answer usually comes within a few microseconds on an idle one).
/// While it yields it runs with the device threads' short slice ([`LentSlice`]).
pub(super) const ASSIST_BUSY: Duration = Duration::from_micros(4);
/// A caller waiting for its own slot's reply polls the whole device when the device published something else,
/// and regardless once every this many spinning rounds (each about the cost of one load of its slot's outbox
/// tail), and in every yielding round ([`DeviceInner::assist_call`]); also at the early rounds
/// [`ASSIST_EARLY_FULL_POLLS`].
const ASSIST_FULL_POLL_EVERY: u32 = 64;
/// The spinning rounds, before the first of every [`ASSIST_FULL_POLL_EVERY`], at which a caller waiting for its own
/// slot's reply polls the whole device as well: a reply from the called slot comes within about ten rounds when a
/// worker is at hand, and an answer that has not come by then may come from elsewhere (the actor forwarded the call
/// to another slot or another device, whose reply only a whole poll reads). Without them a forwarded call waited
/// for round 64: 3.3-4.1 µs for a forward against 1.1-1.7 µs with them (docs/benchmarks.md).
const ASSIST_EARLY_FULL_POLLS: [u32; 2] = [15, 31];
/// Whether a caller's spinning round `round` (from 0) polls the whole device, whatever the device published.
fn whole_poll_due(round: u32) -> bool {
    round % ASSIST_FULL_POLL_EVERY == ASSIST_FULL_POLL_EVERY - 1 || ASSIST_EARLY_FULL_POLLS.contains(&round)
}

/// A waiting caller reads the clock once every this many spinning rounds (a clock read costs more than a round).
const ASSIST_CLOCK_EVERY: u32 = 8;

/// Idle rounds the poller spins through before it yields: few, since a caller waiting for a reply polls in its
/// place ([`DeviceInner::assist`]), and a poller spinning for long kept a busy machine's last free core from
/// the threads that produce the reply (a call took 74-160 µs beside one busy core, 11 µs with these values).
const POLLER_SPIN_ROUNDS: u32 = 16;
/// Idle rounds it then yields through before it parks: as quick to see an event as spinning on an idle machine
/// (a parked poller costs a wake-up), polite on a busy one.
const POLLER_YIELD_ROUNDS: u32 = 256;

/// The poller's wake-up: rung by the executor when it published events or replies, and held back while a caller
/// polls in the poller's place ([`DeviceInner::assist`]): that caller reads what was published (its own outbox in
/// most rounds, the whole device in the others), and the last caller to stop polling rings a held-back wake-up.
/// Waking the poller for what a polling caller reads anyway cost two system calls and two context switches per
/// call, and on a machine with few cores the poller took the core the call's next hop needed.
///
/// Holding back is for a poller that parks: one that only spins and yields (the latency mode on a machine with
/// cores to spare) finds what was published on its next round, and a wake-up costs the executor no system call.
/// Callers then do not take a turn at all ([`PollerBell::poller_may_park`]): a turn's two read-modify-writes, and
/// the executor's word they swap, sat on a latency-mode call's path after its reply was found.
pub(super) struct PollerBell {
    parker: Parker,
    /// Callers polling in the poller's place now.
    assisting: AtomicU32,
    /// A wake-up was held back for them.
    held: AtomicBool,
    /// The poller may park when idle (set by the poller when that changes; on a line of its own, which callers
    /// only read). A hint: a caller that reads it stale takes a turn it did not need, or rings a poller that
    /// started parking a moment ago (a wake-up, as without the bell).
    poller_may_park: OwnLine<AtomicBool>,
}

impl PollerBell {
    pub(super) fn new() -> Self {
        Self {
            parker: Parker::new(),
            assisting: AtomicU32::new(0),
            held: AtomicBool::new(false),
            poller_may_park: OwnLine(AtomicBool::new(true)),
        }
    }

    /// Whether the poller may park when idle: callers polling in its place hold its wake-ups back only then.
    fn poller_may_park(&self) -> bool {
        self.poller_may_park.load(Ordering::Relaxed)
    }

    /// The poller says whether it may park when idle (see [`IdleBackoff::may_park`]).
    fn set_poller_may_park(&self, may_park: bool) {
        self.poller_may_park.store(may_park, Ordering::Relaxed);
    }

    /// The executor published something: wakes the poller unless a caller is polling in its place.
    pub(super) fn ring(&self) {
        // Dekker's pair with `end_assist` (all SeqCst): either this sees the caller still polling, and the
        // caller's `held.swap` after its decrement sees this store, or this sees no caller and wakes.
        self.held.store(true, Ordering::SeqCst);
        if self.assisting.load(Ordering::SeqCst) == 0 && self.held.swap(false, Ordering::SeqCst) {
            self.parker.wake();
        }
    }

    /// Wakes the poller now (a shutdown, a failure to report).
    pub(super) fn wake(&self) {
        self.parker.wake();
    }

    fn begin_assist(&self) {
        self.assisting.fetch_add(1, Ordering::SeqCst);
    }

    fn end_assist(&self) {
        self.assisting.fetch_sub(1, Ordering::SeqCst);
        if self.held.swap(false, Ordering::SeqCst) {
            self.parker.wake();
        }
    }
}

/// The device's host side as its executor sees it ([`HostSide`]): what the executor published wakes the poller,
/// and events block 0 published are read by the executor's thread that tells of them, when no one else is reading
/// the device (`DeviceInner::read_events_here`).
pub(super) struct HostReader {
    bell: Arc<PollerBell>,
    /// The device, once it exists (the executor starts before it).
    device: OnceLock<Weak<DeviceInner>>,
}

impl HostReader {
    pub(super) fn new(bell: Arc<PollerBell>) -> Self {
        Self { bell, device: OnceLock::new() }
    }

    /// From now on events are read on the executor's thread when they can be, for `device`.
    pub(super) fn serve(&self, device: Weak<DeviceInner>) {
        let _ = self.device.set(device);
    }
}

impl HostSide for HostReader {
    fn published(&self) {
        self.bell.ring();
    }

    fn events_published(&self) {
        let read = self.device.get().and_then(Weak::upgrade).is_some_and(|d| d.read_events_here());
        if !read {
            self.bell.ring();
        }
    }
}

/// A caller's turn at polling in the poller's place; ends (ringing what was held back) when dropped.
struct Assisting<'a>(&'a PollerBell);

impl<'a> Assisting<'a> {
    /// A turn, if the poller may park (see [`PollerBell`]); `None`: the executor's wake-ups go to the poller.
    fn begin(bell: &'a PollerBell) -> Option<Self> {
        if !bell.poller_may_park() {
            return None;
        }
        bell.begin_assist();
        Some(Self(bell))
    }
}

impl Drop for Assisting<'_> {
    fn drop(&mut self) {
        self.0.end_assist();
    }
}

/// The poller thread: reads events and outboxes until the device is dropped or shut down (in the latency
/// mode without ever parking).
pub(super) fn poller(device: Weak<DeviceInner>, threads: HostThreads) {
    threads.enter();
    let mut backoff = IdleBackoff::new(POLLER_SPIN_ROUNDS, Duration::from_millis(2))
        .yields(POLLER_YIELD_ROUNDS)
        .latency_mode(threads.latency_mode);
    let bell = match device.upgrade() {
        Some(d) => d.poller_bell.clone(),
        None => return,
    };
    let parker = &bell.parker;
    let mut may_park = true;
    loop {
        let seen = parker.epoch();
        let work = {
            let Some(d) = device.upgrade() else { return };
            if d.closed.load(Ordering::Acquire) {
                return;
            }
            // A caller polling in the poller's place holds the poll state for a moment: the poller does not wait
            // for it. Blocked on the lock, it would be woken by that caller's unlock, a system call on the call's
            // path (seen in a latency-mode call loop's profile). The round counts as idle: the caller reads what
            // it holds the state for, and its end of polling wakes the poller for what was held back.
            let work = match d.poll.try_lock() {
                Some(mut st) => {
                    let st = &mut *st;
                    let work = d.poll_once(st);
                    if d.watch_heartbeat(st) {
                        return;
                    }
                    work
                }
                None => false,
            };
            d.flush_due_senders();
            work
        };
        if work {
            backoff.reset();
        } else {
            backoff.idle(parker, seen);
        }
        if backoff.may_park() != may_park {
            may_park = !may_park;
            bell.set_poller_may_park(may_park);
        }
    }
}

impl DeviceInner {
    /// Polls the whole device in the poller's place for a short while (an answer through a running kernel
    /// usually comes within it), so the answer does not wait for the poller thread to wake: a command's outcome
    /// (block 0's event), or anything else whose answer may come from any slot or any device of the router.
    pub(super) fn assist<T>(&self, completion: &Completion<T>, deadline: Instant) -> Option<T> {
        self.assist_whole(|| completion.try_take(), deadline)
    }

    /// [`DeviceInner::assist`] of an answer that `answered` takes when it is delivered.
    fn assist_whole<T>(&self, answered: impl FnMut() -> Option<T>, deadline: Instant) -> Option<T> {
        self.assist_with(answered, &mut CallClock::until(deadline), |device, _| {
            device.poll_whole();
            None
        })
    }

    /// [`DeviceInner::assist`] for a call to `slot` (correlation `correlation`): the caller watches that slot's outbox
    /// tail itself (a load of a line the device writes) and reads the outbox only when the tail moved, taking its own
    /// reply straight from the cell, with no waiter (a direct call, `waiters.rs`; the reply is there before the
    /// executor's word that the slot has replies, a GPU block's doorbell, rung after its sweep). Each round it also
    /// asks for the lines of the cell the reply will fill (a prefetch: the cell's lines move with the tail's instead of
    /// after it; a latency-mode call 291 -> 281 ns in the VM's fast mode, docs/benchmarks.md) and looks for a waiter
    /// someone left for the call (`wait`: adopted). When block 0 published events (one may end the call: the actor
    /// failed, the message was handed back), at the rounds [`whole_poll_due`] names regardless (twice early, then
    /// every [`ASSIST_FULL_POLL_EVERY`]), and every round once it yields, it polls the whole device and the other
    /// devices of its router (an answer forwarded from another slot or from elsewhere).
    /// Replies in other slots' outboxes do not make it poll the whole device: they are not its answer, and the
    /// executor's word about them stays set after its own reply was taken here, so every call would begin with a whole
    /// poll (its read-modify-writes of the lines the workers mark: a tenth of a latency-mode call loop's samples); they
    /// wait for the next whole poll, or for the poller, which the last caller to stop polling wakes.
    pub(super) fn assist_call(
        &self,
        wait: &mut CallWait,
        clock: &mut CallClock,
        slot: u32,
        correlation: u64,
    ) -> Option<Result<Reply, DeviceError>> {
        if slot >= self.grid.slot_count() {
            let deadline = clock.deadline();
            return self.assist_whole(|| wait.try_take(correlation), deadline);
        }
        let mut seen_tail = None;
        self.assist_with(
            || wait.try_take(correlation),
            clock,
            |device, whole_poll_due| {
                if let Some(t) = seen_tail {
                    // the cell the reply will fill, asked for with the tail: once the device wrote both, the two
                    // lines travel together rather than the cell after the tail was seen
                    device.grid.prefetch_outbox_cell(slot, t);
                }
                let tail = device.grid.outbox_tail(slot);
                if seen_tail != Some(tail) {
                    // the outbox is read up to this tail at least, unless someone else holds the poll state (then
                    // they read it, and a reply of ours reaches the waiter through them)
                    if let Some(found) = device.poll_own_slot(slot, correlation) {
                        seen_tail = Some(tail);
                        return found;
                    }
                } else if whole_poll_due || device.grid.events_unread() {
                    device.poll_whole();
                }
                None
            },
        )
    }

    /// The assist loop: each round takes the answer if delivered (`answered`), else asks `look` to poll and
    /// perhaps find the answer itself (told whether a whole poll is due: every [`ASSIST_FULL_POLL_EVERY`]
    /// spinning rounds, and every yielding round). From the start of `clock` (its first read: here, after the
    /// first rounds, unless the call read it before), it spins for [`ASSIST_BUSY`], then yields, until
    /// [`ASSIST_SPIN`] or the clock's deadline; the clock is read every [`ASSIST_CLOCK_EVERY`] spinning rounds (not
    /// before the first such rounds: an answer that comes within them costs no clock read, ~20 ns each).
    fn assist_with<T>(
        &self,
        mut answered: impl FnMut() -> Option<T>,
        clock: &mut CallClock,
        mut look: impl FnMut(&Self, bool) -> Option<T>,
    ) -> Option<T> {
        let _turn = Assisting::begin(&self.poller_bell);
        let mut spinning = true;
        // the device threads' short slice, lent to this thread from its first yield to the end of its turn
        let mut lent = None;
        for round in 0u32.. {
            if let Some(out) = answered() {
                return Some(out);
            }
            let whole_poll_due = !spinning || whole_poll_due(round);
            if let Some(out) = look(self, whole_poll_due) {
                return Some(out);
            }
            if !spinning || round % ASSIST_CLOCK_EVERY == ASSIST_CLOCK_EVERY - 1 {
                let now = Instant::now();
                let (started, deadline) = (clock.started_at(now), clock.deadline());
                if now >= (started + ASSIST_SPIN).min(deadline) {
                    return None;
                }
                spinning = now < (started + ASSIST_BUSY).min(deadline);
            }
            if spinning {
                std::hint::spin_loop();
            } else {
                if lent.is_none() {
                    lent = Some(LentSlice::lend(self.thread_slice));
                    self.executor.host_waiter_yields();
                }
                std::thread::yield_now();
            }
        }
        None
    }

    /// One poll of the whole device in the poller's place (if no one else is polling it), and of the other
    /// devices of its router (a call its actor forwarded to another device is answered from there).
    fn poll_whole(&self) {
        self.poll_assist();
        self.poll_routed_peers();
    }

    /// Reads what the device published (events first, then the outboxes that have replies), on this thread, if the
    /// device is open and no one else is reading it now; whether it did. For the executor's thread that published
    /// events ([`HostReader`]): the notices they carry (a failure, to its supervisor) leave from here, not from a
    /// poller woken for them (a thread wake-up on a restart's path, 10-20 µs of it on a busy machine).
    fn read_events_here(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.poll_assist()
    }

    /// Polls once in the poller's place if no one else is polling (see [`DeviceInner::poll`]); whether it did.
    pub(super) fn poll_assist(&self) -> bool {
        let Some(mut st) = self.poll.try_lock() else { return false };
        self.poll_once(&mut st);
        true
    }

    /// Reads the events, then `slot`'s outbox, in the poller's place, for the caller waiting for the reply
    /// `correlation` from that slot: that reply, if found, is the caller's (`Some(Some(..))`), without the
    /// executor's word on which slots have replies (what that word says stays for the next whole poll, which
    /// finds the outbox read). `None` when someone else is polling (they deliver what they read). Its reply alone
    /// in the outbox, with no event before it, is taken by `outbox.rs`'s `take_lone_own_reply`.
    fn poll_own_slot(&self, slot: u32, correlation: u64) -> Option<Option<Result<Reply, DeviceError>>> {
        let mut st = self.poll.try_lock()?;
        let st = &mut *st;
        let outbox = &mut st.outboxes[slot as usize];
        if let Some(lone) = self.take_lone_own_reply(st.event_head, &st.held, outbox, slot, correlation) {
            return Some(lone);
        }
        st.sweep.clear();
        self.read_events(&mut st.event_head, &mut st.sweep);
        st.sweep.push(slot);
        let PollState { sweep, outboxes, held, .. } = st;
        let mut own = OwnReply { correlation, answer: None };
        for &s in sweep.iter() {
            let own = if s == slot { Some(&mut own) } else { None };
            self.drain_outbox(s, &mut outboxes[s as usize], held, own);
        }
        Some(own.answer)
    }

    /// Reads and applies the events published since `event_head`, adding each event's slot to `sweep` (block 0
    /// may have answered discarded kernel-to-kernel messages in its outbox). Returns true if there were any.
    fn read_events(&self, event_head: &mut u32, sweep: &mut Vec<u32>) -> bool {
        let tail = self.grid.event_tail();
        let mut any = false;
        while *event_head != tail {
            let raw = self.grid.read_event(*event_head);
            *event_head = event_head.wrapping_add(1);
            self.grid.release_events(*event_head);
            self.apply_event(&raw);
            if raw.slot < self.grid.slot_count() {
                sweep.push(raw.slot);
            }
            any = true;
        }
        any
    }

    /// Reads events and outboxes once. Returns true if it found anything.
    pub(super) fn poll_once(&self, st: &mut PollState) -> bool {
        let PollState { sweep, outboxes, event_head, held, .. } = st;
        sweep.clear();
        // outboxes whose routed message waits for room in its target's inbox are tried again each time
        sweep.extend(held.iter().map(|&(slot, _)| slot));
        let mut work = self.read_events(event_head, sweep);
        if !self.executor.dirty_slots(&mut |s| sweep.push(s)) {
            sweep.extend(0..self.grid.slot_count());
        }
        for &slot in sweep.iter() {
            work |= self.drain_outbox(slot, &mut outboxes[slot as usize], held, None);
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::EventKind;
    use crate::device::{Device, DeviceConfig};
    use crate::event::SlotEvent;
    use crate::EventHook;
    use std::sync::Mutex;

    const T: Duration = Duration::from_secs(10);

    /// The read an executor's thread makes of the events it published (`read_events_here`) never waits: while
    /// someone else holds the poll state it declines (the executor then rings the poller); once it reads, every
    /// event published before it has been applied (here: the creation's, seen by a hook); a closed device is not
    /// read.
    #[test]
    fn an_executor_thread_reads_the_events_when_no_one_else_does_and_never_waits() {
        let d = Device::open(DeviceConfig::default().slots(2)).expect("device");
        let seen: Arc<Mutex<Vec<EventKind>>> = Arc::default();
        let record = seen.clone();
        let hook: Arc<EventHook> = Arc::new(move |e: &SlotEvent| record.lock().unwrap().push(e.event.kind));
        d.on_event(&hook);

        let st = d.inner.poll.lock();
        let created = d.create(0, "echo", &[]).expect("create");
        let until = Instant::now() + T;
        while d.inner.grid.event_tail() == st.event_head {
            assert!(Instant::now() < until, "block 0 never published the creation's event");
            std::thread::yield_now();
        }
        assert!(!d.inner.read_events_here(), "declined while the poll state is held");
        assert!(seen.lock().unwrap().is_empty(), "no one read the event meanwhile");
        drop(st);
        // the poller, woken, may hold the state for a moment: then it reads the event itself
        while !d.inner.read_events_here() {
            assert!(Instant::now() < until, "the poll state was never free");
            std::thread::yield_now();
        }
        assert!(seen.lock().unwrap().contains(&EventKind::Created), "read (here or by the poller) before it returned");
        created.wait_blocking(T).expect("created");

        d.shutdown();
        assert!(!d.inner.read_events_here(), "a closed device is not read");
    }

    /// A waiting caller's whole polls: none in the rounds a reply from its own slot usually takes, two early ones
    /// for an answer forwarded from elsewhere, then one every [`ASSIST_FULL_POLL_EVERY`] rounds.
    #[test]
    fn a_waiting_caller_polls_the_whole_device_early_twice_then_every_64_rounds() {
        let due: Vec<u32> = (0..200).filter(|&r| whole_poll_due(r)).collect();
        assert_eq!(due, [15, 31, 63, 127, 191]);
    }
}
