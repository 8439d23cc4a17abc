//! The calls in flight: the calls map ([`Calls`], a waiter per registered call) and the calls waited for without
//! one, *direct* calls. A caller that polls its own slot's outbox
//! takes its reply from the cell itself ([`DeviceInner::assist_call`](super::DeviceInner)), so in the common case
//! nothing else ever looks its call up; registering a waiter for it (a lock, a map insert and removal, a shared
//! counted pointer cloned and dropped, the waiter made new for the next call: five locked instructions) was paid
//! for nothing. A thread's call in flight is recorded instead in the thread's own [`DirectCell`], with a store,
//! and its correlation id names the cell. Whoever else needs the call's waiter (a reply read by the poller or by
//! another caller, the message handed back, forwarded to another device, or found unroutable) *adopts* the call
//! under the calls map's lock: it claims the cell (a compare-and-swap of the id the caller stored), registers a
//! waiter on the caller's behalf and leaves it in the cell, where the caller, polling, finds it and goes on as a
//! registered call. A caller that stops polling withdraws its id under the same lock, then registers a waiter of
//! its own, unless the call was adopted first. A direct call is one per thread at a time (its thread polls until
//! it is answered or registered), so a cell per thread is enough.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::IdMap;
use crate::error::DeviceError;
use crate::message::Reply;
use crate::spin_lock::SpinLock;
use crate::sync::{lock, Completion};

/// Waits for a call's reply.
pub(super) type CallWaiter = Arc<Completion<Result<Reply, DeviceError>>>;

/// The waiters of a device's registered calls, by correlation id, behind the device's `calls` lock; every lookup
/// of a call by someone other than its caller goes through here, and adopts a direct call it finds waiting.
#[derive(Default)]
pub(super) struct Calls {
    waiting: IdMap<CallWaiter>,
    /// Set when the device closed and failed every waiter with this error: a caller that registers later gets it.
    closed_with: Option<DeviceError>,
}

impl Calls {
    /// Registers the waiter of the call `correlation`.
    pub(super) fn insert(&mut self, correlation: u64, waiter: CallWaiter) {
        self.waiting.insert(correlation, waiter);
    }

    /// Removes the call's registered waiter (its caller gives up on it, or forwarding undoes a registration).
    pub(super) fn remove(&mut self, correlation: u64) -> Option<CallWaiter> {
        self.waiting.remove(&correlation)
    }

    /// The waiter that answers the call `correlation`, taken out: its registered waiter, or one registered for a
    /// direct call adopted now ([`adopt`]). `None`: no call waits for that id.
    pub(super) fn take(&mut self, correlation: u64) -> Option<CallWaiter> {
        self.waiting.remove(&correlation).or_else(|| adopt(correlation))
    }

    /// The waiter of the call `correlation`, left registered (a forwarded call: the waiter moves to the target
    /// device once the message is delivered there); a direct call is adopted and its waiter registered here.
    pub(super) fn find(&mut self, correlation: u64) -> Option<CallWaiter> {
        if let Some(w) = self.waiting.get(&correlation) {
            return Some(w.clone());
        }
        let waiter = adopt(correlation)?;
        self.waiting.insert(correlation, waiter.clone());
        Some(waiter)
    }

    /// Closes the map: every registered waiter taken out (for the caller to fail with `error`), and every later
    /// registration refused with it ([`Calls::closed_with`]).
    pub(super) fn close(&mut self, error: DeviceError) -> Vec<CallWaiter> {
        self.closed_with = Some(error);
        self.waiting.drain().map(|(_, w)| w).collect()
    }

    /// The error the device closed with, once it did.
    pub(super) fn closed_with(&self) -> Option<DeviceError> {
        self.closed_with.clone()
    }
}

/// Set in the correlation id of a direct call (never in an id from `correlation.rs`, which counts from 1 and
/// would take centuries to reach it).
const DIRECT_BIT: u64 = 1 << 63;
/// A direct call's id: the bit, the caller's cell index above this shift, and the low bits of an ordinary id.
const CELL_SHIFT: u32 = 40;
/// Threads that can hold a cell at once; a thread beyond them registers a waiter for every call.
const MAX_CELLS: usize = 4096;

/// The cells of the process, by index (allocated on a thread's first call, kept for the next thread when it
/// ends: a stale id names the cell but no longer matches it).
static CELLS: [AtomicPtr<DirectCell>; MAX_CELLS] = [const { AtomicPtr::new(null_mut()) }; MAX_CELLS];
/// Cell indexes never handed out start here.
static NEXT_CELL: AtomicU32 = AtomicU32::new(0);
/// Indexes of cells whose thread ended.
static FREE_CELLS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// One thread's direct call in flight (see the module's doc), on cache lines of its own.
#[repr(align(128))]
pub(super) struct DirectCell {
    index: u32,
    /// The id of the thread's direct call in flight; 0 when there is none, or once it was adopted or withdrawn.
    correlation: AtomicU64,
    /// The thread has a direct call in flight (read and written by the thread alone): a call made while one is
    /// (from a hook the first call's polling ran) registers a waiter instead.
    busy: AtomicBool,
    /// A waiter was left in `adopted` (read by the caller on each round: its own line, so a plain load).
    has_adopted: AtomicBool,
    /// The waiter registered on the caller's behalf, with the id of the call it is for.
    adopted: SpinLock<Option<(u64, CallWaiter)>>,
}

/// Whether `correlation` is a direct call's id.
pub(super) fn is_direct(correlation: u64) -> bool {
    correlation & DIRECT_BIT != 0
}

impl DirectCell {
    /// Starts a direct call: its id (made from `id`, an ordinary one), recorded in the cell before the call's
    /// message is published, so whoever reads the reply or the hand-back finds it. `None` while the thread has a
    /// direct call in flight already.
    pub(super) fn try_begin(&self, id: u64) -> Option<u64> {
        if self.busy.load(Ordering::Relaxed) {
            return None;
        }
        self.busy.store(true, Ordering::Relaxed);
        let correlation = DIRECT_BIT | (u64::from(self.index) << CELL_SHIFT) | (id & ((1 << CELL_SHIFT) - 1));
        self.correlation.store(correlation, Ordering::Relaxed);
        Some(correlation)
    }

    /// Ends the direct call: its caller took the answer itself from the outbox (no one adopts the call after: a
    /// message is answered or handed back exactly once, and its answer was this reply), or it failed before its
    /// message was written. A plain store: no one else writes the id while it matches.
    pub(super) fn end(&self) {
        self.correlation.store(0, Ordering::Relaxed);
        self.busy.store(false, Ordering::Relaxed);
    }

    /// The waiter left for the call `correlation`, if it was adopted (the caller's round: one load when not).
    /// A waiter left for an earlier call of the cell (a thread that ended mid-call) is dropped.
    pub(super) fn take_adopted(&self, correlation: u64) -> Option<CallWaiter> {
        if !self.has_adopted.load(Ordering::Acquire) {
            return None;
        }
        let mut adopted = self.adopted.lock();
        self.has_adopted.store(false, Ordering::Relaxed);
        match adopted.take() {
            Some((id, waiter)) if id == correlation => {
                self.busy.store(false, Ordering::Relaxed);
                Some(waiter)
            }
            _ => None,
        }
    }

    /// Withdraws the call `correlation` (its caller stops polling; the caller holds the calls map's lock):
    /// true if no one adopted it, so the caller registers a waiter of its own; false if it was adopted, the
    /// waiter in the cell ([`DirectCell::take_adopted`]).
    pub(super) fn withdraw(&self, correlation: u64) -> bool {
        let withdrawn = self.correlation.compare_exchange(correlation, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        if withdrawn {
            self.busy.store(false, Ordering::Relaxed);
        }
        withdrawn
    }
}

/// This thread's cell (`None` when every cell is held by a live thread, or while the thread ends).
pub(super) fn own_cell() -> Option<&'static DirectCell> {
    OWN_CELL.try_with(|own| own.0).ok().flatten()
}

/// Adopts the direct call `correlation` if its caller still waits for it without a waiter (see the module's
/// doc): registers a waiter for it, left in its cell, and returns it. The caller holds the calls map's lock.
pub(super) fn adopt(correlation: u64) -> Option<CallWaiter> {
    if !is_direct(correlation) {
        return None;
    }
    let index = ((correlation & !DIRECT_BIT) >> CELL_SHIFT) as usize;
    let cell = CELLS.get(index)?.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in CELLS is a leaked, never freed cell.
    let cell = unsafe { cell.as_ref() }?;
    cell.correlation.compare_exchange(correlation, 0, Ordering::Relaxed, Ordering::Relaxed).ok()?;
    let waiter: CallWaiter = Arc::new(Completion::new());
    *cell.adopted.lock() = Some((correlation, waiter.clone()));
    cell.has_adopted.store(true, Ordering::Release);
    Some(waiter)
}

/// A thread's hold on its cell: given back, for another thread, when the thread ends.
struct OwnCell(Option<&'static DirectCell>);

impl OwnCell {
    fn take() -> Self {
        let index = lock(&FREE_CELLS).pop().or_else(|| {
            let next = NEXT_CELL.fetch_add(1, Ordering::Relaxed);
            (next < MAX_CELLS as u32).then_some(next)
        });
        Self(index.map(|i| {
            let slot = &CELLS[i as usize];
            let existing = slot.load(Ordering::Acquire);
            // SAFETY: non-null entries are leaked cells, never freed.
            if let Some(cell) = unsafe { existing.as_ref() } {
                return cell;
            }
            let cell = Box::leak(Box::new(DirectCell {
                index: i,
                correlation: AtomicU64::new(0),
                busy: AtomicBool::new(false),
                has_adopted: AtomicBool::new(false),
                adopted: SpinLock::new(None),
            }));
            slot.store(cell, Ordering::Release);
            &*cell
        }))
    }
}

impl Drop for OwnCell {
    fn drop(&mut self) {
        if let Some(cell) = self.0 {
            cell.end();
            let _ = cell.take_adopted(0);
            lock(&FREE_CELLS).push(cell.index);
        }
    }
}

thread_local! {
    static OWN_CELL: OwnCell = OwnCell::take();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An adopted call's waiter reaches its caller; a withdrawn call cannot be adopted; an id that no longer
    /// matches the cell (the call ended) is not adopted either.
    #[test]
    fn a_call_is_adopted_once_and_only_while_its_caller_waits_without_a_waiter() {
        std::thread::spawn(|| {
            let cell = own_cell().expect("a cell");
            let first = cell.try_begin(7).expect("free");
            assert!(cell.try_begin(70).is_none(), "one direct call at a time");
            assert!(is_direct(first) && !is_direct(7));
            let adopted = adopt(first).expect("adopted while waiting");
            assert!(adopt(first).is_none(), "adopted once");
            assert!(!cell.withdraw(first), "an adopted call is not withdrawn");
            let taken = cell.take_adopted(first).expect("the waiter left in the cell");
            assert!(Arc::ptr_eq(&taken, &adopted));
            assert!(cell.take_adopted(first).is_none(), "taken once");

            let second = cell.try_begin(8).expect("free once the adopted waiter was taken");
            assert_ne!(first, second);
            assert!(cell.withdraw(second), "withdrawn before anyone adopted it");
            assert!(adopt(second).is_none(), "a withdrawn call is not adopted");

            let third = cell.try_begin(9).expect("free once withdrawn");
            cell.end();
            assert!(cell.try_begin(10).is_some(), "free once ended");
            cell.end();
            assert!(adopt(third).is_none(), "an ended call is not adopted");
            assert!(adopt(9).is_none(), "an ordinary id is never adopted");
        })
        .join()
        .expect("thread");
    }

    /// A waiter left for an earlier call (its thread ended mid-call) does not answer the cell's next call.
    #[test]
    fn a_waiter_left_for_another_call_is_not_taken() {
        std::thread::spawn(|| {
            let cell = own_cell().expect("a cell");
            let stale = cell.try_begin(1).expect("free");
            adopt(stale).expect("adopted");
            cell.end(); // as a thread that ended mid-call leaves it
            let next = cell.try_begin(2).expect("free");
            assert!(cell.take_adopted(next).is_none(), "the earlier call's waiter is not this call's");
            assert!(cell.withdraw(next));
        })
        .join()
        .expect("thread");
    }
}
