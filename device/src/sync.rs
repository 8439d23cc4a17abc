//! Small hand-off primitives usable from both sync and async code: a one-shot [`Completion`] and an
//! unbounded multi-consumer [`Stream`] (tokio's channels cannot wait with a timeout from plain threads, and
//! std's cannot be awaited; these do both); and the crate's lock helpers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Locks `m`, ignoring poisoning: every lock of this crate guards data that a panic cannot leave half-written
/// (single assignments and whole-record updates), and the device must keep accounting after a user's panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A value on cache lines of its own: a word one thread writes all the time (a worker's lock of block 0, the
/// replies flag), kept off the line of the words other threads only read (128 bytes: a line and the adjacent one
/// that x86's spatial prefetcher fetches with it).
#[repr(align(128))]
pub(crate) struct OwnLine<T>(pub(crate) T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A value delivered once.
pub(crate) struct Completion<T> {
    slot: Mutex<Delivery<T>>,
    /// A value is (or was) delivered: read without the lock by a waiter that polls ([`Completion::try_take`]),
    /// so a poll round with nothing delivered writes no shared line.
    delivered: AtomicBool,
    cond: Condvar,
    notify: Notify,
}

/// A [`Completion`]'s value, and how many threads wait for it on the condition variable (std's `notify_all`
/// is a system call even with nobody waiting: counting the sleepers spares a call answered while its caller
/// polls, the common case, that call's cost).
struct Delivery<T> {
    value: Option<T>,
    blocked: u32,
}

impl<T> Completion<T> {
    pub(crate) fn new() -> Self {
        Self {
            slot: Mutex::new(Delivery { value: None, blocked: 0 }),
            delivered: AtomicBool::new(false),
            cond: Condvar::new(),
            notify: Notify::new(),
        }
    }

    /// Delivers the value (a second delivery replaces an unread first one; callers deliver once).
    pub(crate) fn complete(&self, value: T) {
        let blocked = {
            let mut slot = lock(&self.slot);
            slot.value = Some(value);
            self.delivered.store(true, Ordering::Release);
            slot.blocked
        };
        if blocked > 0 {
            self.cond.notify_all();
        }
        // tokio's Notify with no waiter only stores a permit (no system call)
        self.notify.notify_one();
    }

    /// Takes the value if it has been delivered (the lock is taken only once it has).
    pub(crate) fn try_take(&self) -> Option<T> {
        if !self.delivered.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.slot).value.take()
    }

    pub(crate) fn wait_blocking(&self, timeout: Duration) -> Option<T> {
        let deadline = crate::clock::deadline_after(timeout);
        let mut guard = lock(&self.slot);
        loop {
            if let Some(v) = guard.value.take() {
                return Some(v);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // counted under the lock that `complete` reads the count under: it sees this sleeper, or this
            // thread sees its value
            guard.blocked += 1;
            guard = self.cond.wait_timeout(guard, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
            guard.blocked -= 1;
        }
    }

    pub(crate) async fn wait(&self, timeout: Duration) -> Option<T> {
        let fut = async {
            loop {
                let notified = self.notify.notified();
                if let Some(v) = lock(&self.slot).value.take() {
                    return v;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, fut).await.ok()
    }
}

/// An unbounded queue with any number of consumers; closed when the device shuts down.
pub struct Stream<T> {
    inner: std::sync::Arc<StreamInner<T>>,
}

pub(crate) struct StreamInner<T> {
    items: Mutex<(VecDeque<T>, bool)>,
    cond: Condvar,
    notify: Notify,
}

impl<T> Clone for Stream<T> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<T> Stream<T> {
    pub(crate) fn new() -> Self {
        Self {
            inner: std::sync::Arc::new(StreamInner {
                items: Mutex::new((VecDeque::new(), false)),
                cond: Condvar::new(),
                notify: Notify::new(),
            }),
        }
    }

    pub(crate) fn downgrade(&self) -> std::sync::Weak<StreamInner<T>> {
        std::sync::Arc::downgrade(&self.inner)
    }

    pub(crate) fn push_to(inner: &StreamInner<T>, item: T) {
        lock(&inner.items).0.push_back(item);
        inner.cond.notify_one();
        inner.notify.notify_waiters();
    }

    pub(crate) fn push(&self, item: T) {
        Self::push_to(&self.inner, item)
    }

    pub(crate) fn close_inner(inner: &StreamInner<T>) {
        lock(&inner.items).1 = true;
        inner.cond.notify_all();
        inner.notify.notify_waiters();
    }

    pub(crate) fn close(&self) {
        Self::close_inner(&self.inner)
    }

    /// Takes the next item if one is queued.
    pub fn try_recv(&self) -> Option<T> {
        lock(&self.inner.items).0.pop_front()
    }

    /// Waits up to `timeout` for the next item; `None` on timeout or when closed and empty.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<T> {
        let deadline = crate::clock::deadline_after(timeout);
        let mut guard = lock(&self.inner.items);
        loop {
            if let Some(v) = guard.0.pop_front() {
                return Some(v);
            }
            let now = Instant::now();
            if guard.1 || now >= deadline {
                return None;
            }
            guard = self.inner.cond.wait_timeout(guard, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Waits for the next item; `None` when closed and empty.
    pub async fn recv(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut guard = lock(&self.inner.items);
                if let Some(v) = guard.0.pop_front() {
                    return Some(v);
                }
                if guard.1 {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// True once the stream is closed (the device shut down); queued items can still be taken.
    pub fn is_closed(&self) -> bool {
        lock(&self.inner.items).1
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        lock(&self.inner.items).0.len()
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
