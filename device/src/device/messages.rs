//! Messages to actors: one-way sends, batches, posts and calls, written into a slot's inbox by the host (the
//! inbox's single producer: senders to one slot are serialised by the slot's lock).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::accounting::inbox_floor;
use super::Device;
use crate::error::DeviceError;
use crate::message::{check_payload, Envelope, Reply};
use crate::sync::{lock, Completion};
use crate::wait::Retry;

/// Waits for a call's reply.
pub(super) type CallWaiter = Arc<Completion<Result<Reply, DeviceError>>>;

impl Device {
    /// Sends a one-way message (the actor does not reply). Fails at once if the inbox is full. Returns the
    /// message's correlation id.
    pub fn send(&self, slot: u32, payload: &[u8]) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, false, None)
    }

    /// Sends one-way messages to `slot` in one go: one lock, one tail publication and one wake-up for the
    /// whole batch (what a stream producer wants). Writes as many as fit in the inbox now, in order, and
    /// returns how many ([`DeviceError::InboxFull`] if none fits). A payload too large fails the call
    /// before anything is written.
    pub fn send_batch<P: AsRef<[u8]>>(&self, slot: u32, payloads: &[P]) -> Result<usize, DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        for p in payloads {
            check_payload(p.as_ref())?;
        }
        if payloads.is_empty() {
            return Ok(0);
        }
        let inner = &self.inner;
        let capacity = inner.grid.config().inbox_capacity;
        let mut host = lock(&inner.slots[slot as usize]);
        if !host.accepting {
            return Err(inner.refusal(&host, slot));
        }
        let floor = inbox_floor(&inner.grid, &mut host, slot, capacity);
        let room = capacity.saturating_sub(host.tail.wrapping_sub(floor)) as usize;
        let n = room.min(payloads.len());
        if n == 0 {
            return Err(DeviceError::InboxFull { slot });
        }
        let first = inner.next_correlation.fetch_add(n as u64, Ordering::Relaxed);
        let hlc = host_hlc();
        for (i, p) in payloads[..n].iter().enumerate() {
            let mut raw = Envelope::to_actor_unchecked(slot, first + i as u64, p.as_ref(), false).to_raw();
            raw.hlc = hlc;
            inner.grid.write_inbox(slot, host.tail, &raw);
            host.tail = host.tail.wrapping_add(1);
        }
        inner.grid.publish_inbox_tail(slot, host.tail);
        drop(host);
        inner.counters.sent.fetch_add(n as u64, Ordering::Relaxed);
        inner.executor.notify(slot);
        Ok(n)
    }

    /// Sends a one-way message, waiting up to `timeout` for room in the inbox.
    pub fn send_timeout(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, false, Some(Instant::now() + timeout))
    }

    /// Sends a message whose reply goes to [`Device::replies`], waiting up to `timeout` for room in the inbox.
    /// Returns the correlation id the reply will carry.
    pub fn post(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, true, Some(Instant::now() + timeout))
    }

    /// Sends a message and waits for its reply. The device's error answer comes back as
    /// [`DeviceError::ErrorReply`], a message handed back undelivered as [`DeviceError::Undelivered`].
    pub fn call(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        let deadline = Instant::now() + timeout;
        let (correlation, waiter) = self.start_call(slot, payload, deadline)?;
        let out = match self.assist_until_answered(&waiter, deadline) {
            Some(out) => Some(out),
            None => waiter.wait_blocking(deadline.saturating_duration_since(Instant::now())),
        };
        self.finish_call(correlation, out)
    }

    /// Async form of [`Device::call`]. Waiting for inbox room, if any, polls briefly.
    pub async fn call_async(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        let deadline = Instant::now() + timeout;
        let (correlation, waiter) = loop {
            match self.start_call(slot, payload, Instant::now()) {
                Err(DeviceError::InboxFull { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_micros(100)).await
                }
                other => break other?,
            }
        };
        let out = match self.assist_until_answered(&waiter, deadline) {
            Some(out) => Some(out),
            None => waiter.wait(deadline.saturating_duration_since(Instant::now())).await,
        };
        self.finish_call(correlation, out)
    }

    pub(super) fn assist_until_answered(
        &self,
        waiter: &CallWaiter,
        deadline: Instant,
    ) -> Option<Result<Reply, DeviceError>> {
        self.inner.assist(waiter, deadline)
    }

    pub(super) fn start_call(
        &self,
        slot: u32,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<(u64, CallWaiter), DeviceError> {
        let correlation = self.inner.next_correlation.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Completion::new());
        lock(&self.inner.calls).insert(correlation, waiter.clone());
        let env = match Envelope::to_actor(slot, correlation, payload, true) {
            Ok(env) => env,
            Err(e) => {
                lock(&self.inner.calls).remove(&correlation);
                return Err(e);
            }
        };
        if let Err(e) = self.write_envelope(slot, env, Some(deadline)) {
            lock(&self.inner.calls).remove(&correlation);
            return Err(e);
        }
        Ok((correlation, waiter))
    }

    pub(super) fn finish_call(
        &self,
        correlation: u64,
        out: Option<Result<Reply, DeviceError>>,
    ) -> Result<Reply, DeviceError> {
        match out {
            Some(r) => r,
            None => {
                // A reply that arrives later goes to `replies()`.
                lock(&self.inner.calls).remove(&correlation);
                self.check_open()?;
                Err(DeviceError::Timeout)
            }
        }
    }

    pub(super) fn write_message(
        &self,
        slot: u32,
        payload: &[u8],
        want_reply: bool,
        deadline: Option<Instant>,
    ) -> Result<u64, DeviceError> {
        let correlation = self.inner.next_correlation.fetch_add(1, Ordering::Relaxed);
        let env = Envelope::to_actor(slot, correlation, payload, want_reply)?;
        self.write_envelope(slot, env, deadline)?;
        Ok(correlation)
    }

    /// Writes an envelope as given (header fields included) into `slot`'s inbox. For tests that feed
    /// malformed envelopes to the device; the device answers those with an error reply.
    #[doc(hidden)]
    pub fn send_envelope(&self, slot: u32, env: Envelope) -> Result<(), DeviceError> {
        self.write_envelope(slot, env, None)
    }

    pub(super) fn write_envelope(
        &self,
        slot: u32,
        env: Envelope,
        deadline: Option<Instant>,
    ) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let inner = &self.inner;
        let capacity = inner.grid.config().inbox_capacity;
        let mut raw = env.to_raw();
        let mut retry = Retry::new(Duration::from_micros(20));
        loop {
            let mut host = lock(&inner.slots[slot as usize]);
            if !host.accepting {
                return Err(inner.refusal(&host, slot));
            }
            let floor = inbox_floor(&inner.grid, &mut host, slot, capacity);
            if host.tail.wrapping_sub(floor) < capacity {
                raw.hlc = host_hlc();
                inner.grid.write_inbox(slot, host.tail, &raw);
                host.tail = host.tail.wrapping_add(1);
                inner.grid.publish_inbox_tail(slot, host.tail);
                drop(host);
                inner.counters.sent.fetch_add(1, Ordering::Relaxed);
                inner.executor.notify(slot);
                return Ok(());
            }
            drop(host);
            inner.executor.wake();
            if !deadline.is_some_and(|d| retry.again(d)) {
                return Err(DeviceError::InboxFull { slot });
            }
        }
    }
}

/// The host's hybrid-logical-clock stamp for a message: wall-clock milliseconds in the high 48 bits.
pub(super) fn host_hlc() -> u64 {
    let ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    ms << 16
}
