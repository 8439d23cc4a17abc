//! [`SpinLock`]: a lock for data its holders keep for a few instructions, where the lock itself is the cost
//! (a coalescing sender's buffer, taken once per message; a device's calls map, poll state and slots' send
//! state, each taken once or twice per call).
//!
//! std's `Mutex` pays two read-modify-writes per use (the exchange that takes it and the swap that releases it,
//! which reads whether a thread sleeps on it); this one pays one: it is released with a plain store, because no
//! thread ever sleeps on it. A thread that finds it held spins briefly, then yields, then naps, so a holder that
//! keeps it long (a flush waiting for room in an inbox) costs its waiters a sleep, not a core.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Rounds a waiter spins before it yields.
const SPIN_ROUNDS: u32 = 64;
/// Rounds it then yields before it naps.
const YIELD_ROUNDS: u32 = 64;
/// A waiter's nap once it stops yielding.
const NAP: Duration = Duration::from_micros(50);

/// A mutual-exclusion lock taken with one atomic exchange and released with one store (see the module's doc).
/// No poisoning: a holder that panics releases it, and its users keep data a panic cannot leave half-written.
#[derive(Default)]
pub(crate) struct SpinLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and `held` lets one guard exist at a time (taken with an
// acquiring exchange, released with a releasing store), so threads hand `T` to each other as through a Mutex:
// sharing the lock needs no more of `T` than `Send`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Access to a [`SpinLock`]'s value; releases the lock when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    /// A lock, not held, around `value`.
    pub(crate) const fn new(value: T) -> Self {
        Self { held: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock, waiting for its holder (spinning, then yielding, then napping).
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut round = 0u32;
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            // wait for a release before exchanging again: reads share the line with the holder, exchanges do not
            while self.held.load(Ordering::Relaxed) {
                round = round.saturating_add(1);
                if round <= SPIN_ROUNDS {
                    std::hint::spin_loop();
                } else if round <= SPIN_ROUNDS + YIELD_ROUNDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(NAP);
                }
            }
        }
    }

    /// Takes the lock if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        (!self.held.swap(true, Ordering::Acquire)).then(|| SpinGuard { lock: self })
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the lock's only one (see `Sync` above), so no other reference to the value lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the guard's only live reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // releases what this holder wrote to whoever takes the lock next (their exchange acquires)
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn try_lock_fails_while_held_and_succeeds_once_released() {
        let lock = SpinLock::<u32>::default();
        let mut guard = lock.try_lock().expect("free");
        *guard = 7;
        assert!(lock.try_lock().is_none(), "held");
        assert!(lock.try_lock().is_none(), "still held after a failed try");
        drop(guard);
        assert_eq!(*lock.try_lock().expect("released"), 7);
    }

    #[test]
    fn increments_from_several_threads_are_not_lost() {
        // a non-atomic read-modify-write of the value under the lock: a lock that let two holders in would
        // lose increments (and the holders sleep inside it now and then, so waiters reach the yielding and
        // napping rounds too)
        let lock = Arc::new(SpinLock::<(u64, u64)>::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let mut g = lock.lock();
                        let seen = g.0;
                        if i % 4_096 == 0 {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        g.0 = seen + 1;
                        g.1 += 2;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let g = lock.lock();
        assert_eq!((g.0, g.1), (80_000, 160_000));
    }

    #[test]
    fn a_holder_that_panics_releases_the_lock() {
        let lock = Arc::new(SpinLock::<u32>::default());
        let l = lock.clone();
        let _ = std::thread::spawn(move || {
            let _g = l.lock();
            panic!("holder fails");
        })
        .join();
        assert!(lock.try_lock().is_some());
    }
}
