//! The host side of the outboxes, in one place: reading a slot's outbox from the host's head (replies to their
//! callers, routed messages to their targets), a large reply's bytes, and a caller's own reply when it lies alone
//! in its slot's outbox. Only the holder of the poll state reads outboxes (`poll.rs`: the poller, or a caller
//! polling in its place); `inbox.rs` is the writing side.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::routing::{self, RouteStep};
use super::waiters;
use super::DeviceInner;
use crate::bulk;
use crate::error::DeviceError;
use crate::layout::{RawEnvelope, RV_ERR_BAD_ENVELOPE, RV_KIND_ERROR};
use crate::message::{Envelope, Reply};
use crate::ring;

/// The reply a caller polling its own slot's outbox waits for ([`DeviceInner::assist_call`]), and, once read,
/// its answer.
pub(super) struct OwnReply {
    pub(super) correlation: u64,
    pub(super) answer: Option<Result<Reply, DeviceError>>,
}

/// One slot's outbox as the poll state's holder reads it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OutboxCursor {
    /// Where the host has read it up to.
    pub(super) head: u32,
    /// Where the host last released it to the device up to (the `outbox_head` the device sees): behind `head`
    /// while the cells of lone replies wait to be released ([`lone_release_every`]).
    pub(super) released: u32,
}

/// A caller that took its own lone reply releases the outbox cells read to the device once this many lie
/// unreleased (an eighth of the outbox, at least one; the general read releases each cell as it goes): a release
/// is a store to the control block's line whose `host_seq` the actor's worker watches for the next message, and
/// each one cost the next call a transfer of that line (a latency-mode call 8-20 ns faster released every eighth
/// reply, docs/benchmarks.md). The device reads the host's head only when the room it last saw runs out, and
/// then finds at least seven eighths of the outbox free of unread replies; a routed send (which keeps a cell free
/// for its message's reply) finds at most `capacity / 8 - 1` cells fewer.
pub(super) fn lone_release_every(capacity: u32) -> u32 {
    (capacity / 8).max(1)
}

impl DeviceInner {
    /// [`DeviceInner::poll_own_slot`] in its common case, read as the general path would read it but without its
    /// book-keeping (the sweep, the held messages, the reply's hand-offs: ~10 ns of a 400 ns latency-mode call):
    /// no events to apply first, no routed message held, and in `slot`'s outbox nothing, or one message: the
    /// reply to the direct call `correlation`. `None` otherwise (the general path reads).
    /// The poll state's holder passes where it has read the events up to (`event_head`), the routed messages
    /// it holds, and its cursor of `slot`'s outbox. The cell read is released lazily (see [`lone_release_every`]).
    pub(super) fn take_lone_own_reply(
        &self,
        event_head: u32,
        held: &[(u32, Instant)],
        OutboxCursor { head, released }: &mut OutboxCursor,
        slot: u32,
        correlation: u64,
    ) -> Option<Option<Result<Reply, DeviceError>>> {
        if !waiters::is_direct(correlation) || !held.is_empty() || self.grid.event_tail() != event_head {
            return None;
        }
        match ring::distance(*head, self.grid.outbox_tail(slot)) {
            0 => return Some(None),
            1 => {}
            _ => return None,
        }
        let raw = self.grid.read_outbox(slot, *head);
        if raw.correlation != correlation || routing::is_routed(&raw) {
            return None;
        }
        let env = self.outbox_envelope(slot, raw);
        *head = head.wrapping_add(1);
        if ring::distance(*released, *head) >= lone_release_every(self.grid.config().outbox_capacity) {
            self.grid.release_outbox(slot, *head);
            *released = *head;
        }
        self.executor.outbox_read();
        Some(Some(answer(self.counted_reply(slot, env))))
    }

    /// Reads `slot`'s outbox from the cursor's head, releasing each cell as it goes: replies to their callers,
    /// routed messages to their targets (one that must wait for room stops the read: later cells wait behind it,
    /// and `held` says since when).
    /// `own`: the reply the caller reading this outbox waits for itself, handed to it there (see
    /// [`DeviceInner::deliver_reply`]).
    pub(super) fn drain_outbox(
        &self,
        slot: u32,
        OutboxCursor { head, released }: &mut OutboxCursor,
        held: &mut Vec<(u32, Instant)>,
        mut own: Option<&mut OwnReply>,
    ) -> bool {
        let tail = self.grid.outbox_tail(slot);
        let available = ring::distance(*head, tail);
        if available == 0 {
            return false;
        }
        let capacity = self.grid.config().outbox_capacity;
        if available > capacity {
            tracing::error!(slot, head = *head, tail, "impossible outbox tail from the device; ignoring it");
            return false;
        }
        let start = *head;
        // only the first cell can be one held before
        let mut held_since = held.iter().position(|&(s, _)| s == slot).map(|i| held.swap_remove(i).1);
        while *head != tail {
            let raw = self.grid.read_outbox(slot, *head);
            let reply = if routing::is_routed(&raw) {
                if let RouteStep::Hold = self.route_outbox_message(slot, &raw, held_since) {
                    held.push((slot, held_since.unwrap_or_else(Instant::now)));
                    break;
                }
                None
            } else {
                Some(self.outbox_envelope(slot, raw))
            };
            *head = head.wrapping_add(1);
            self.grid.release_outbox(slot, *head);
            *released = *head;
            if let Some(env) = reply {
                self.deliver_reply(slot, env, own.as_deref_mut());
            }
            held_since = None;
        }
        if *head == start {
            return false;
        }
        self.executor.outbox_read();
        true
    }

    /// The reply `raw` read from `slot`'s outbox, a large one's bytes included (and frees them for the device).
    /// A reference outside the slot's area is the device's error: the reply becomes an error answer
    /// (`BadEnvelope`), so a caller waiting for it is answered, not left to time out.
    fn outbox_envelope(&self, slot: u32, mut raw: RawEnvelope) -> Envelope {
        let Some(r) = bulk::reference(&raw) else { return Envelope::from_raw(&raw) };
        match bulk::offset(self.grid.config().bulk_bytes, r) {
            Some(offset) => {
                let bytes = self.grid.read_outbox_bulk(slot, offset, r.len);
                self.grid.release_outbox_bulk(slot, r.end);
                Envelope::from_raw_parts(&raw, Some(bytes))
            }
            None => {
                tracing::error!(slot, end = r.end, len = r.len, "impossible bulk reference from the device");
                raw.kind = RV_KIND_ERROR as u8;
                raw.flags = 0;
                raw.payload_len = 8;
                raw.payload[..4].copy_from_slice(&RV_ERR_BAD_ENVELOPE.to_le_bytes());
                raw.payload[4..8].copy_from_slice(&r.len.to_le_bytes());
                Envelope::from_raw(&raw)
            }
        }
    }

    /// Hands the reply `env` read from `slot`'s outbox to `own` when it is the reply the caller reading the
    /// outbox waits for itself (a direct call has no waiter; a registered one's leaves the map: nothing else
    /// answers it), else to its call's waiter (a direct call adopted now, `Calls::take`), or to
    /// [`Device::replies`](super::Device::replies) when no call waits for it.
    ///
    /// Runs under the poll state's lock (outboxes are read only by its holder), so its counters have one writer
    /// at a time: a load and a store, not a read-modify-write (a locked instruction on every call's path).
    pub(super) fn deliver_reply(&self, slot: u32, env: Envelope, own: Option<&mut OwnReply>) {
        let reply = self.counted_reply(slot, env);
        let correlation = reply.correlation;
        let own = own.filter(|own| own.correlation == correlation);
        // the caller's own: a direct call has no waiter, a registered one's leaves the map (nothing else answers
        // either); the map's lock is taken once either way
        let own_direct = own.is_some() && waiters::is_direct(correlation);
        let waiter = if own_direct { None } else { self.calls.lock().take(correlation) };
        match (own, waiter) {
            (Some(own), waiter) if own_direct || waiter.is_some() => own.answer = Some(answer(reply)),
            (_, Some(w)) => w.complete(answer(reply)),
            (_, None) => self.replies.push(reply),
        }
    }

    /// The reply `env` read from `slot`'s outbox, counted (replies, error replies). Under the poll state's lock.
    fn counted_reply(&self, slot: u32, env: Envelope) -> Reply {
        let count = |counter: &std::sync::atomic::AtomicU64| {
            counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed)
        };
        count(&self.counters.replies);
        let reply = Reply::from_envelope(slot, env);
        if reply.is_error() {
            count(&self.counters.error_replies);
        }
        reply
    }
}

/// A call's answer from its reply: the reply, or the error an error reply carries.
fn answer(reply: Reply) -> Result<Reply, DeviceError> {
    match reply.payload() {
        Err(e) => Err(e),
        Ok(_) => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, DeviceConfig};
    use crate::error::DeviceCode;
    use crate::wait::CallClock;
    use std::time::Duration;

    const T: Duration = Duration::from_secs(10);

    /// [`DeviceInner::take_lone_own_reply`] of device `d` for the holder of its poll state `st` (a guard).
    macro_rules! take_lone {
        ($d:expr, $st:expr, $slot:expr, $correlation:expr) => {{
            let st = &mut *$st;
            $d.inner.take_lone_own_reply(st.event_head, &st.held, &mut st.outboxes[$slot as usize], $slot, $correlation)
        }};
    }

    /// Waits until `slot`'s outbox holds `n` messages past the host's `head` (the caller holds the poll state, so
    /// no one else reads the outbox).
    fn wait_for_outbox(d: &Device, head: u32, slot: u32, n: u32) {
        let until = Instant::now() + T;
        while ring::distance(head, d.inner.grid.outbox_tail(slot)) < n {
            assert!(Instant::now() < until, "the device never published {n} messages in slot {slot}'s outbox");
            std::thread::yield_now();
        }
    }

    /// A direct call's reply alone in its slot's outbox is taken, read as the general path reads it: the reply,
    /// counted, the outbox read past it; an error reply answers with its error, counted as one; an empty outbox
    /// is nothing yet; an id that is not a direct call's is left to the general path.
    #[test]
    fn a_direct_calls_lone_reply_is_taken_counted_and_an_error_reply_answers_with_its_error() {
        let d = Device::open(DeviceConfig::default().slots(2)).expect("device");
        d.create(0, "echo", &[]).and_then(|p| p.wait_blocking(T)).expect("echo");
        d.create(1, "test", &[]).and_then(|p| p.wait_blocking(T)).expect("test");
        let mut st = d.inner.poll.lock();
        let before = d.stats();

        let (correlation, wait) = d.start_call(0, b"hello", None).expect("call written");
        assert!(waiters::is_direct(correlation), "the thread's first call in flight is a direct one");
        wait_for_outbox(&d, st.outboxes[0].head, 0, 1);
        let ordinary = super::super::correlation::next();
        assert!(take_lone!(d, st, 0, ordinary).is_none(), "not a direct call's id");
        let got = take_lone!(d, st, 0, correlation);
        match got {
            Some(Some(Ok(reply))) => {
                assert_eq!(reply.payload().expect("a reply"), b"hello");
                assert_eq!((reply.slot, reply.correlation), (0, correlation));
            }
            other => panic!("expected the echo's reply, got {other:?}"),
        }
        assert_eq!(st.outboxes[0].head, d.inner.grid.outbox_tail(0), "the outbox was read past the reply");
        assert!(matches!(take_lone!(d, st, 0, correlation), Some(None)), "nothing more");
        wait.finish();

        // a payload under 4 bytes: the test behaviour answers BadEnvelope with the length as its detail
        let (correlation, wait) = d.start_call(1, &[1, 2], None).expect("call written");
        wait_for_outbox(&d, st.outboxes[1].head, 1, 1);
        let got = take_lone!(d, st, 1, correlation);
        assert!(
            matches!(got, Some(Some(Err(DeviceError::ErrorReply { code: DeviceCode::BadEnvelope, detail: 2 })))),
            "{got:?}"
        );
        wait.finish();
        drop(st);

        let after = d.stats();
        assert_eq!(after.replies - before.replies, 2, "both replies counted");
        assert_eq!(after.error_replies - before.error_replies, 1, "the error reply counted as one");
        d.shutdown();
    }

    /// The outbox cells of lone replies are released to the device every eighth of the outbox (at least every
    /// cell): a 64-cell outbox's head, as the device sees it, moves at the eighth reply taken, not before.
    #[test]
    fn lone_replies_are_released_to_the_device_an_eighth_of_the_outbox_at_a_time() {
        assert_eq!([1, 2, 8, 64, 4096].map(lone_release_every), [1, 1, 1, 8, 512]);
        for (capacity, every) in [(64u32, 8u32), (8, 1)] {
            let d = Device::open(DeviceConfig::default().slots(1).outbox_capacity(capacity)).expect("device");
            d.create(0, "echo", &[]).and_then(|p| p.wait_blocking(T)).expect("echo");
            let mut st = d.inner.poll.lock();
            for taken in 1..=2 * every {
                let (correlation, wait) = d.start_call(0, b"released?", None).expect("call written");
                wait_for_outbox(&d, st.outboxes[0].head, 0, 1);
                assert!(matches!(take_lone!(d, st, 0, correlation), Some(Some(Ok(_)))), "reply {taken} taken");
                wait.finish();
                let (device_head, tail) = d.snapshot(0).expect("snapshot").outbox;
                assert_eq!(tail, taken, "every reply read");
                assert_eq!(device_head, taken - taken % every, "capacity {capacity}, {taken} replies taken");
            }
            drop(st);
            d.shutdown();
        }
    }

    /// Calls slot 0 of device `d` with `payload` while the test holds its poll state `st` (a guard, dropped
    /// here): once `in_outbox` messages lie in the outbox, the lone reply's path declines for `why`, reading
    /// nothing, and the general path then answers the call with the echo.
    macro_rules! declined_then_answered {
        ($d:expr, $st:expr, $payload:expr, $in_outbox:expr, $why:expr) => {{
            let (correlation, mut wait) = $d.start_call(0, $payload, None).expect("call written");
            wait_for_outbox(&$d, $st.outboxes[0].head, 0, $in_outbox);
            let head = $st.outboxes[0].head;
            assert!(take_lone!($d, $st, 0, correlation).is_none(), $why);
            assert_eq!($st.outboxes[0].head, head, "nothing read");
            drop($st);
            let answer = $d.inner.assist_call(&mut wait, &mut CallClock::new(T), 0, correlation);
            assert_eq!(answer.expect("answered").expect("a reply").payload().expect("echo"), $payload);
            wait.finish();
        }};
    }

    /// The lone reply's path declines, reading nothing, when the general path must read: block 0 published
    /// events (applied first), or the outbox holds another message before the reply (a send's reply, which goes
    /// to `replies()`). The general path then answers the call and delivers the rest.
    #[test]
    fn the_lone_replys_path_reads_nothing_while_events_or_other_messages_come_first() {
        let d = Device::open(DeviceConfig::default().slots(2)).expect("device");
        d.create(0, "echo", &[]).and_then(|p| p.wait_blocking(T)).expect("echo");
        let replies = d.replies();

        // an event first: the creation of slot 1
        let mut st = d.inner.poll.lock();
        let created = d.create(1, "echo", &[]).expect("create");
        let until = Instant::now() + T;
        while d.inner.grid.event_tail() == st.event_head {
            assert!(Instant::now() < until, "block 0 never published the creation's event");
            std::thread::yield_now();
        }
        declined_then_answered!(d, st, b"after an event", 1, "events come first");
        created.wait_blocking(T).expect("created");

        // a send's reply before the call's
        let mut st = d.inner.poll.lock();
        let sent = d.write_message(0, b"sent first", true, None).expect("sent");
        declined_then_answered!(d, st, b"called second", 2, "not alone in the outbox");
        let first = replies.recv_timeout(T).expect("the send's reply delivered");
        assert_eq!((first.correlation, first.payload().expect("echo")), (sent, &b"sent first"[..]));
        d.shutdown();
    }
}
