//! Messages to actors: one-way sends, batches, posts and calls, written into a slot's inbox by the host (the
//! inbox's single producer: senders to one slot are serialised by the slot's lock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::waiters::{self, CallWaiter, DirectCell};
use super::{correlation, Device, DeviceInner};
use crate::behaviour::BehaviourId;
use crate::clock::deadline_after;
use crate::error::DeviceError;
use crate::layout::{RawEnvelope, RV_KIND_STATE};
use crate::message::{Envelope, Reply, PAYLOAD_BYTES};
use crate::sync::Completion;
use crate::wait::{CallClock, Retry};

/// How a call in flight is waited for.
pub(super) enum CallWait {
    /// Through its waiter in the calls map.
    Registered(CallWaiter),
    /// As this thread's direct call (`waiters.rs`): its caller takes the reply from the outbox itself, unless
    /// someone else adopts the call, which leaves a waiter in the cell.
    Direct(&'static DirectCell),
}

impl CallWait {
    /// The answer of the call `correlation`, if delivered to its waiter; a direct call that was adopted becomes
    /// a registered one here.
    pub(super) fn try_take(&mut self, correlation: u64) -> Option<Result<Reply, DeviceError>> {
        match self {
            Self::Registered(waiter) => waiter.try_take(),
            Self::Direct(cell) => {
                let waiter = cell.take_adopted(correlation)?;
                let answer = waiter.try_take();
                *self = Self::Registered(waiter);
                answer
            }
        }
    }

    /// The call is over: its waiter kept for the thread's next call, or its direct call ended.
    pub(super) fn finish(self) {
        match self {
            Self::Registered(waiter) => recycle_waiter(waiter),
            Self::Direct(cell) => cell.end(),
        }
    }
}

thread_local! {
    /// The waiter of this thread's last call, kept for its next one once nothing else holds it: a waiter was
    /// allocated and freed on every call.
    static SPARE_WAITER: std::cell::Cell<Option<CallWaiter>> = const { std::cell::Cell::new(None) };
}

/// A waiter for a new call: this thread's spare, or a new one.
fn new_waiter() -> CallWaiter {
    SPARE_WAITER.with(|spare| spare.take()).unwrap_or_else(|| Arc::new(Completion::new()))
}

/// Keeps `waiter`, its call over, as this thread's spare if no one else holds it (a poller that took it from
/// the map to answer it may still), made new: nothing delivered, no permit, no sleeper.
fn recycle_waiter(mut waiter: CallWaiter) {
    if let Some(completion) = Arc::get_mut(&mut waiter) {
        *completion = Completion::new();
        SPARE_WAITER.with(|spare| spare.set(Some(waiter)));
    }
}

impl Device {
    /// The largest payload this device takes: [`PAYLOAD_BYTES`], or its bulk areas' size
    /// ([`DeviceConfig::bulk_bytes`](crate::DeviceConfig#structfield.bulk_bytes)) when that is larger.
    pub fn max_payload(&self) -> usize {
        (self.inner.grid.config().bulk_bytes as usize).max(PAYLOAD_BYTES)
    }

    /// Whether this device takes a message of `payload`'s length ([`Device::max_payload`]): the check made
    /// before anything is written or queued.
    pub fn check_payload(&self, payload: &[u8]) -> Result<(), DeviceError> {
        self.check_payload_len(payload.len())
    }

    fn check_payload_len(&self, len: usize) -> Result<(), DeviceError> {
        let max = self.max_payload();
        if len > max {
            return Err(DeviceError::PayloadTooLarge { len, max });
        }
        Ok(())
    }

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
            self.check_payload(p.as_ref())?;
        }
        self.inner.publish_batch(slot, payloads.iter().map(AsRef::as_ref))
    }

    /// Sends a one-way message, waiting up to `timeout` for room in the inbox.
    pub fn send_timeout(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, false, Some(timeout))
    }

    /// Sends a message whose reply goes to [`Device::replies`], waiting up to `timeout` for room in the inbox.
    /// Returns the correlation id the reply will carry.
    pub fn post(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, true, Some(timeout))
    }

    /// Sends a message and waits for its reply. The device's error answer comes back as
    /// [`DeviceError::ErrorReply`], a message handed back undelivered as [`DeviceError::Undelivered`].
    pub fn call(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        self.run_call(slot, timeout, |clock| self.start_call(slot, payload, clock))
    }

    /// Async form of [`Device::call`]. Waiting for inbox room, if any, polls briefly.
    pub async fn call_async(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        self.run_call_async(slot, timeout, |clock| self.start_call(slot, payload, clock)).await
    }

    /// Writes a call to `slot` with `start` (given the call's clock: it waits for inbox room until the clock's
    /// deadline; `None`: it does not wait), then waits for its answer until `timeout` has passed.
    pub(super) fn run_call(
        &self,
        slot: u32,
        timeout: Duration,
        start: impl FnOnce(Option<&mut CallClock>) -> Result<(u64, CallWait), DeviceError>,
    ) -> Result<Reply, DeviceError> {
        // No clock read on the fast path: the call's clock starts at its first read, the assist's after its first
        // rounds (or the write's, if the inbox is full); a call answered before then reads it not at all.
        let mut clock = CallClock::new(timeout);
        let (correlation, mut wait) = start(Some(&mut clock))?;
        let out = match self.assist_until_answered(&mut wait, &mut clock, slot, correlation) {
            Some(out) => Some(out),
            None => match self.inner.register_call(&mut wait, correlation) {
                Ok(waiter) => waiter.wait_blocking(clock.left()),
                Err(e) => Some(Err(e)),
            },
        };
        let result = self.finish_call(correlation, out);
        wait.finish();
        result
    }

    /// Async form of [`Device::run_call`]: `start` is tried without waiting, and again after a short sleep
    /// while the inbox is full.
    async fn run_call_async(
        &self,
        slot: u32,
        timeout: Duration,
        start: impl Fn(Option<&mut CallClock>) -> Result<(u64, CallWait), DeviceError>,
    ) -> Result<Reply, DeviceError> {
        // One unit of the task's cooperative budget per call: a task that calls in a loop, each call answered
        // while it polls in the poller's place (no await that waits), still yields to the runtime when its
        // budget is spent, as it would on any tokio resource (producers calling flat out starved a runtime's
        // other tasks: the chaos test's fault injector).
        tokio::task::coop::consume_budget().await;
        let mut clock = CallClock::new(timeout);
        let (correlation, mut wait) = loop {
            match start(None) {
                Err(DeviceError::InboxFull { .. }) if Instant::now() < clock.deadline() => {
                    tokio::time::sleep(Duration::from_micros(100)).await
                }
                other => break other?,
            }
        };
        // no await from the write to the registration: a direct call is the thread's until then
        let out = match self.assist_until_answered(&mut wait, &mut clock, slot, correlation) {
            Some(out) => Some(out),
            None => match self.inner.register_call(&mut wait, correlation) {
                Ok(waiter) => waiter.wait(clock.left()).await,
                Err(e) => Some(Err(e)),
            },
        };
        let result = self.finish_call(correlation, out);
        wait.finish();
        result
    }

    /// Polls in the poller's place until the answer of the call `correlation` comes or a short while after the
    /// call's clock started has passed (`slot`: the actor called, whose outbox the answer usually comes through).
    pub(super) fn assist_until_answered(
        &self,
        wait: &mut CallWait,
        clock: &mut CallClock,
        slot: u32,
        correlation: u64,
    ) -> Option<Result<Reply, DeviceError>> {
        self.inner.assist_call(wait, clock, slot, correlation)
    }

    /// Reads a copy of the actor's state (OTP's `sys:get_state`): taken between two messages, in order with the
    /// messages sent to the slot before it (the behaviour does not run, nothing is counted as processed). As
    /// many bytes as the slot's behaviour declares (`ringvisor_build::Behaviours::state`); the whole region,
    /// [`DeviceConfig::state_bytes`](crate::DeviceConfig#structfield.state_bytes) long, for a behaviour that
    /// declares none. A read larger than [`Device::max_payload`] is refused before anything is sent
    /// ([`DeviceError::StateTooLargeToRead`]). Errors as [`Device::call`]'s.
    pub fn read_state(&self, slot: u32, timeout: Duration) -> Result<Vec<u8>, DeviceError> {
        let len = self.declared_state_len(slot)?;
        self.read_state_prefix(slot, len, timeout)
    }

    /// Async form of [`Device::read_state`].
    pub async fn read_state_async(&self, slot: u32, timeout: Duration) -> Result<Vec<u8>, DeviceError> {
        let len = self.declared_state_len(slot)?;
        self.read_state_prefix_async(slot, len, timeout).await
    }

    /// [`Device::read_state`] of the state region's first `len` bytes, whatever the behaviour declares (a `len`
    /// past the region is [`DeviceError::PayloadTooLarge`] with the region's size as its limit).
    pub fn read_state_prefix(&self, slot: u32, len: usize, timeout: Duration) -> Result<Vec<u8>, DeviceError> {
        let reply = self.run_call(slot, timeout, |clock| self.start_state_read(slot, len, clock))?;
        Ok(reply.payload()?.to_vec())
    }

    /// Async form of [`Device::read_state_prefix`].
    pub async fn read_state_prefix_async(
        &self,
        slot: u32,
        len: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, DeviceError> {
        let reply = self.run_call_async(slot, timeout, |clock| self.start_state_read(slot, len, clock)).await?;
        Ok(reply.payload()?.to_vec())
    }

    /// Bytes of state the behaviour now in `slot` declares; the whole region when it declares none.
    fn declared_state_len(&self, slot: u32) -> Result<usize, DeviceError> {
        self.check_slot(slot)?;
        let behaviour = BehaviourId(self.inner.grid.snapshot(slot).behaviour);
        let region = self.inner.grid.config().state_bytes;
        Ok(match self.inner.behaviours.state_bytes(behaviour) {
            0 => region,
            declared => declared.min(region),
        } as usize)
    }

    fn start_state_read(
        &self,
        slot: u32,
        len: usize,
        clock: Option<&mut CallClock>,
    ) -> Result<(u64, CallWait), DeviceError> {
        let region = self.inner.grid.config().state_bytes as usize;
        if len > region {
            return Err(DeviceError::PayloadTooLarge { len, max: region });
        }
        let max = self.max_payload();
        if len > max {
            return Err(DeviceError::StateTooLargeToRead { len, max });
        }
        // the request's payload is the length wanted (rv_state_read_len); the reply is that prefix
        let request = (len as u32).to_le_bytes();
        let mut raw = Envelope::raw_to_actor(slot, 0, &request, true, 0);
        raw.kind = RV_KIND_STATE as u8;
        self.start_call_with(slot, raw, &request, clock)
    }

    pub(super) fn start_call(
        &self,
        slot: u32,
        payload: &[u8],
        clock: Option<&mut CallClock>,
    ) -> Result<(u64, CallWait), DeviceError> {
        self.start_call_flagged(slot, payload, 0, clock)
    }

    /// [`Device::start_call`] of an envelope with the `RV_FLAG_*` bits `flags` set besides (a traced call).
    pub(super) fn start_call_flagged(
        &self,
        slot: u32,
        payload: &[u8],
        flags: u8,
        clock: Option<&mut CallClock>,
    ) -> Result<(u64, CallWait), DeviceError> {
        self.check_payload(payload)?;
        let mut raw = Envelope::raw_to_actor(slot, 0, payload, true, 0);
        raw.flags |= flags;
        self.start_call_with(slot, raw, payload, clock)
    }

    /// Gives the call `raw` (payload `payload`) its correlation id, then writes it: as this thread's direct call
    /// if it can be one (`waiters.rs`), else with a waiter registered first. Returns the id and how to wait.
    fn start_call_with(
        &self,
        slot: u32,
        mut raw: RawEnvelope,
        payload: &[u8],
        clock: Option<&mut CallClock>,
    ) -> Result<(u64, CallWait), DeviceError> {
        let id = correlation::next();
        let deadline = || clock.map(CallClock::deadline);
        if let Some((cell, direct)) = waiters::own_cell().and_then(|cell| cell.try_begin(id).map(|d| (cell, d))) {
            raw.correlation = direct;
            if let Err(e) = self.write_raw(slot, raw, payload, deadline) {
                cell.end();
                return Err(e);
            }
            return Ok((direct, CallWait::Direct(cell)));
        }
        raw.correlation = id;
        let waiter = new_waiter();
        self.inner.calls.lock().insert(id, waiter.clone());
        if let Err(e) = self.write_raw(slot, raw, payload, deadline) {
            self.inner.calls.lock().remove(id);
            return Err(e);
        }
        Ok((id, CallWait::Registered(waiter)))
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
                self.inner.calls.lock().remove(correlation);
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
        wait: Option<Duration>,
    ) -> Result<u64, DeviceError> {
        self.check_payload(payload)?;
        let correlation = correlation::next();
        let raw = Envelope::raw_to_actor(slot, correlation, payload, want_reply, 0);
        self.write_raw(slot, raw, payload, || wait.map(deadline_after))?;
        Ok(correlation)
    }

    /// Writes an envelope as given (header fields included) into `slot`'s inbox. For tests that feed
    /// malformed envelopes to the device; the device answers those with an error reply.
    #[doc(hidden)]
    pub fn send_envelope(&self, slot: u32, env: Envelope) -> Result<(), DeviceError> {
        self.write_raw(slot, env.to_raw(), env.payload(), || None)
    }

    /// Writes the envelope `raw` of the message whose payload is `payload` (in `raw` already if it fits one
    /// envelope, into the bulk area otherwise) into `slot`'s inbox, stamped with the host's HLC, waiting for room
    /// until the deadline `deadline` gives (asked for only once the inbox is full; `None`: no wait).
    fn write_raw(
        &self,
        slot: u32,
        mut raw: RawEnvelope,
        payload: &[u8],
        deadline: impl FnOnce() -> Option<Instant>,
    ) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let inner = &self.inner;
        let mut retry = Retry::new(Duration::from_micros(20));
        let (mut deadline, mut until) = (Some(deadline), None);
        loop {
            raw.hlc = host_hlc();
            if inner.try_write(slot, raw, payload, || {})? {
                return Ok(());
            }
            inner.executor.wake();
            if let Some(deadline) = deadline.take() {
                until = deadline();
                if until.is_some() {
                    // the first wait for room: the device's threads must not be queued behind this one (a send
                    // that does not wait yields nothing)
                    inner.executor.host_waiter_yields();
                }
            }
            if !until.is_some_and(|d| retry.again(d)) {
                return Err(DeviceError::InboxFull { slot });
            }
        }
    }
}

/// The host's hybrid-logical-clock stamp for a message: wall-clock milliseconds in the high 48 bits, read from
/// the coarse real-time clock (the kernel's last tick, a few milliseconds' resolution, read without a clock
/// access: a send costs tens of nanoseconds less than with the precise clock).
pub(super) fn host_hlc() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    let ms = if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
        (ts.tv_sec as u64).wrapping_mul(1000).wrapping_add(ts.tv_nsec as u64 / 1_000_000)
    } else {
        0
    };
    ms << 16
}

impl DeviceInner {
    /// The waiter of the call `correlation` whose caller stops polling and waits: its registered one, or for a
    /// direct call, the waiter someone adopted it with, or else one registered now (the call withdrawn from the
    /// thread's cell under the calls map's lock, so no one adopts it after). Fails with the device's closing
    /// error if it closed before the registration (its waiters were failed already).
    pub(super) fn register_call(&self, wait: &mut CallWait, correlation: u64) -> Result<CallWaiter, DeviceError> {
        let cell = match wait {
            CallWait::Registered(waiter) => return Ok(waiter.clone()),
            CallWait::Direct(cell) => *cell,
        };
        let mut calls = self.calls.lock();
        // not withdrawn: adopted under this lock, its waiter is in the cell
        let adopted = if cell.withdraw(correlation) { None } else { cell.take_adopted(correlation) };
        let waiter = match adopted {
            Some(waiter) => waiter,
            None => {
                if let Some(e) = calls.closed_with() {
                    return Err(e);
                }
                let waiter = new_waiter();
                calls.insert(correlation, waiter.clone());
                waiter
            }
        };
        *wait = CallWait::Registered(waiter.clone());
        Ok(waiter)
    }

    /// [`Device::send_batch`] of payloads already checked against the largest payload (a coalescing sender's
    /// buffer), given as an iterator so that the caller need not collect them.
    pub(super) fn publish_batch<'a>(
        &self,
        slot: u32,
        payloads: impl ExactSizeIterator<Item = &'a [u8]>,
    ) -> Result<usize, DeviceError> {
        if payloads.len() == 0 {
            return Ok(0);
        }
        let hlc = host_hlc();
        // the batch's correlation ids reserved at once (not one take per message); ids of messages the inbox has
        // no room for are skipped, and ids need only be unique
        let mut next = correlation::take(payloads.len() as u64);
        let envelope = |payload: &[u8]| {
            let correlation = next;
            next += 1;
            // a large payload is not copied into an envelope first: it goes straight to the bulk area
            Envelope::raw_to_actor(slot, correlation, payload, false, hlc)
        };
        match self.write_inbox(slot, payloads, envelope, |_| {})? {
            0 => Err(DeviceError::InboxFull { slot }),
            n => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;

    const T: Duration = Duration::from_secs(10);

    fn echo_device() -> Device {
        let d = Device::open(DeviceConfig::default().slots(2)).expect("device");
        d.create(0, "echo", &[]).expect("create").wait_blocking(T).expect("created");
        d
    }

    /// A direct call whose reply someone else reads (here this test, polling in the poller's place before the
    /// caller looks; or the poller thread) is adopted: a waiter registered for it reaches the caller through its
    /// cell, with the reply, and nothing stays in the calls map.
    #[test]
    fn a_direct_calls_reply_read_by_someone_else_reaches_its_caller_through_an_adopted_waiter() {
        let d = echo_device();
        let (correlation, mut wait) = d.start_call(0, b"adopted", None).expect("written");
        assert!(matches!(wait, CallWait::Direct(_)), "a thread's call is direct");
        let until = Instant::now() + T;
        let answer = loop {
            d.inner.poll_assist();
            if let Some(answer) = wait.try_take(correlation) {
                break answer;
            }
            assert!(Instant::now() < until, "the reply never reached the caller");
            std::thread::yield_now();
        };
        assert_eq!(answer.expect("reply").payload().expect("payload"), b"adopted");
        assert!(matches!(wait, CallWait::Registered(_)), "an adopted call goes on as a registered one");
        assert!(d.inner.calls.lock().remove(correlation).is_none(), "the waiter left the map with its answer");
        wait.finish();
        let (_, next) = d.start_call(0, b"next", None).expect("written");
        assert!(matches!(next, CallWait::Direct(_)), "the thread's cell is free again for its next call");
        next.finish();
    }

    /// A direct call's caller that stops polling registers a waiter (withdrawn from its cell first, or, if
    /// someone adopted the call already, with the adopted one): either way the reply reaches it.
    #[test]
    fn a_direct_call_whose_caller_stops_polling_is_answered_through_the_waiter_it_registers() {
        let d = echo_device();
        for round in 0..200u32 {
            let payload = round.to_le_bytes();
            let (correlation, mut wait) = d.start_call(0, &payload, None).expect("written");
            let waiter = d.inner.register_call(&mut wait, correlation).expect("registered");
            let until = Instant::now() + T;
            let answer = loop {
                d.inner.poll_assist();
                if let Some(answer) = waiter.try_take() {
                    break answer;
                }
                assert!(Instant::now() < until, "round {round}: the reply never reached the waiter");
                std::thread::yield_now();
            };
            assert_eq!(answer.expect("reply").payload().expect("payload"), payload);
            assert!(d.inner.calls.lock().remove(correlation).is_none(), "round {round}: the map is left empty");
            drop(waiter);
            wait.finish();
        }
    }

    /// A direct call registered after its device closed is not left waiting: it was adopted as the device
    /// closed (its reply read or its message handed back), and its waiter is answered, or its registration fails
    /// with the closing error (the device failed every registered waiter as it closed).
    #[test]
    fn a_direct_call_registered_after_its_device_closed_is_answered_or_fails_with_the_closing_error() {
        let d = echo_device();
        let (correlation, mut wait) = d.start_call(0, b"late", None).expect("written");
        d.shutdown();
        match d.inner.register_call(&mut wait, correlation) {
            // the call was adopted before the device closed (its reply read, or its message handed back)
            Ok(waiter) => assert!(waiter.wait_blocking(T).is_some(), "an adopted call is answered"),
            Err(e) => assert_eq!(e, DeviceError::Closed),
        }
        wait.finish();
    }

    /// A waiter comes back for the thread's next call only when nothing else holds it, and then with nothing
    /// delivered: a reply left in it would answer the next call.
    #[test]
    fn a_recycled_waiter_is_reused_only_when_unshared_and_starts_empty() {
        let first = new_waiter();
        first.complete(Err(DeviceError::Timeout));
        let address = Arc::as_ptr(&first);
        recycle_waiter(first);
        let second = new_waiter();
        assert_eq!(Arc::as_ptr(&second), address, "the spare is reused");
        assert!(second.try_take().is_none(), "a reused waiter holds no earlier answer");

        // held elsewhere (a poller answering it): not kept, the next call gets a waiter of its own
        let held = second.clone();
        recycle_waiter(second);
        let third = new_waiter();
        assert_ne!(Arc::as_ptr(&third), Arc::as_ptr(&held), "a waiter someone holds is not reused");
        held.complete(Err(DeviceError::Timeout));
        assert!(third.try_take().is_none(), "the shared waiter's answer does not reach the new call");
    }
}
