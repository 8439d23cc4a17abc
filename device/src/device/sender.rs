//! A coalescing sender of one-way messages to one slot ([`Device::sender`]): single sends published in batches, so
//! a stream producer pays one lock, one tail publication and one wake-up per batch, not per message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Device, DeviceInner};
use crate::error::DeviceError;
use crate::message::Reply;
use crate::spin_lock::SpinLock;
use crate::sync::lock;
use crate::wait::Retry;

/// Messages a [`SlotSender`] holds before it publishes them, by default.
pub const DEFAULT_SENDER_BATCH: usize = 32;
/// How long a [`SlotSender`]'s oldest message waits to be published, at most (plus the poller's idle sleep, up
/// to 2 ms, when nothing else is sent), by default.
pub const DEFAULT_SENDER_DELAY: Duration = Duration::from_micros(200);
/// How long a flush waits for room in the inbox, by default.
pub const DEFAULT_SENDER_TIMEOUT: Duration = Duration::from_secs(1);

/// A sender reads the clock for its delay once every this many messages.
const DELAY_CHECK_EVERY: usize = 8;

/// A sender of one-way messages to one slot that coalesces them ([`Device::sender`]). Each [`SlotSender::send`]
/// copies its payload into the sender's buffer; the buffer is published as one batch, in order, when it holds
/// `batch` messages, on [`SlotSender::flush`], before a [`SlotSender::call`] (so the call comes after them), when
/// the oldest message has waited `max_delay` (the device's poller publishes an idle sender's buffer), and when the
/// sender is dropped. A message is in the inbox, in send order, once a flush has returned; what a flush could not
/// publish stays buffered (the buffer holds at most `batch` messages: past that, `send` returns the error that
/// stops the flush and does not take the message). Dropping a sender whose buffer cannot be published within its
/// timeout logs an error with the number of messages left out; call [`SlotSender::flush`] first to handle it.
pub struct SlotSender {
    device: Device,
    buffer: Arc<SenderBuffer>,
    batch: usize,
    timeout: Duration,
}

/// A sender's buffer, shared with the poller (which publishes it once its oldest message is `max_delay` old).
pub(super) struct SenderBuffer {
    slot: u32,
    max_delay: Duration,
    /// Taken by the producer once per message, and by the poller now and then: a [`SpinLock`], which costs one
    /// read-modify-write per message where std's `Mutex` cost two (single sends in a probe: 15.8 -> 19.4-20 M/s).
    pending: SpinLock<Pending>,
}

/// Buffered payloads, back to back, and where each ends.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    oldest: Option<Instant>,
}

impl Pending {
    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Publishes what fits in the inbox now, in order, and removes it from the buffer. `Ok(true)` once empty.
    fn publish(&mut self, device: &DeviceInner, slot: u32) -> Result<bool, DeviceError> {
        if self.ends.is_empty() {
            return Ok(true);
        }
        let (bytes, ends) = (&self.bytes, &self.ends);
        let payloads = (0..ends.len()).map(|i| &bytes[if i == 0 { 0 } else { ends[i - 1] }..ends[i]]);
        // (each payload was checked when it was sent)
        let written = match device.publish_batch(slot, payloads) {
            Ok(n) => n,
            Err(DeviceError::InboxFull { .. }) => 0,
            Err(e) => return Err(e),
        };
        if written > 0 {
            let cut = self.ends[written - 1];
            self.bytes.drain(..cut);
            self.ends.drain(..written);
            self.ends.iter_mut().for_each(|end| *end -= cut);
            self.oldest = (!self.ends.is_empty()).then(Instant::now);
        }
        Ok(self.ends.is_empty())
    }
}

impl Device {
    /// A coalescing sender of one-way messages to `slot` ([`SlotSender`]), with [`DEFAULT_SENDER_BATCH`],
    /// [`DEFAULT_SENDER_DELAY`] and [`DEFAULT_SENDER_TIMEOUT`].
    pub fn sender(&self, slot: u32) -> Result<SlotSender, DeviceError> {
        self.sender_with(slot, DEFAULT_SENDER_BATCH, DEFAULT_SENDER_DELAY, DEFAULT_SENDER_TIMEOUT)
    }

    /// [`Device::sender`] with its own batch size (at least 1), longest delay and flush timeout.
    pub fn sender_with(
        &self,
        slot: u32,
        batch: usize,
        max_delay: Duration,
        timeout: Duration,
    ) -> Result<SlotSender, DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        if batch == 0 {
            return Err(DeviceError::InvalidConfig("a sender's batch must hold at least one message".into()));
        }
        let buffer = Arc::new(SenderBuffer { slot, max_delay, pending: SpinLock::default() });
        lock(&self.inner.senders).push(Arc::downgrade(&buffer)); // (the poller forgets it once dropped)
        Ok(SlotSender { device: self.clone(), buffer, batch, timeout })
    }
}

impl SlotSender {
    /// The slot it sends to.
    pub fn slot(&self) -> u32 {
        self.buffer.slot
    }

    /// Messages buffered, not yet in the inbox.
    pub fn buffered(&self) -> usize {
        self.buffer.pending.lock().len()
    }

    /// Buffers a one-way message, publishing the buffer when it is full or its oldest message is due (waiting up
    /// to the sender's timeout for room in the inbox). A payload too large fails at once. An error means this
    /// message was not taken: the buffer is full of messages the device does not take now (the error says why;
    /// they stay buffered for a later flush).
    pub fn send(&self, payload: &[u8]) -> Result<(), DeviceError> {
        self.device.check_payload(payload)?;
        let mut pending = self.buffer.pending.lock();
        if pending.len() >= self.batch {
            self.flush_locked(&mut pending)?;
        }
        pending.bytes.extend_from_slice(payload);
        let end = pending.bytes.len();
        pending.ends.push(end);
        let oldest = *pending.oldest.get_or_insert_with(Instant::now);
        // the clock is read every eighth message (the poller publishes a buffer that waits past its delay anyway)
        let due = || pending.len().is_multiple_of(DELAY_CHECK_EVERY) && oldest.elapsed() >= self.buffer.max_delay;
        if pending.len() >= self.batch || due() {
            // the message is taken whatever this flush finds: it stays buffered if the flush cannot publish it
            let _ = self.flush_locked(&mut pending);
        }
        Ok(())
    }

    /// Publishes every buffered message, waiting up to the sender's timeout for room in the inbox. On an error
    /// what was not published stays buffered.
    pub fn flush(&self) -> Result<(), DeviceError> {
        self.flush_locked(&mut self.buffer.pending.lock())
    }

    /// Flushes, then calls the slot ([`Device::call`]): the call comes after every message sent before it.
    pub fn call(&self, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        self.flush()?;
        self.device.call(self.buffer.slot, payload, timeout)
    }

    fn flush_locked(&self, pending: &mut Pending) -> Result<(), DeviceError> {
        let deadline = crate::clock::deadline_after(self.timeout);
        let mut retry = Retry::new(Duration::from_micros(100));
        loop {
            if pending.publish(&self.device.inner, self.buffer.slot)? {
                return Ok(());
            }
            if !retry.again(deadline) {
                return Err(DeviceError::InboxFull { slot: self.buffer.slot });
            }
        }
    }
}

impl Drop for SlotSender {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            let left = self.buffered();
            tracing::error!(slot = self.buffer.slot, left, error = %e, "a dropped sender's messages were not sent");
        }
    }
}

impl DeviceInner {
    /// Publishes the buffers of the senders whose oldest message is due, without waiting (the poller's round):
    /// what does not fit stays buffered. A sender in use by its producer is left to it; a dropped one is
    /// forgotten.
    pub(super) fn flush_due_senders(self: &Arc<Self>) {
        let mut senders = lock(&self.senders);
        if senders.is_empty() {
            return;
        }
        senders.retain(|weak| {
            let Some(buffer) = weak.upgrade() else { return false };
            if let Some(mut pending) = buffer.pending.try_lock() {
                if pending.oldest.is_some_and(|t| t.elapsed() >= buffer.max_delay) {
                    let _ = pending.publish(self, buffer.slot);
                }
            }
            true
        });
    }
}
