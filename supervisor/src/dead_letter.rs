//! The dead-letter queue: every message ringvisor could not deliver, with the reason, kept (bounded) for
//! inspection, subscription and redelivery.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use ringvisor_device::{DeviceCode, Endpoint, Envelope, UndeliveredReason, UnroutableReason};
use tokio::sync::mpsc;

use crate::sync::lock;

/// Why a message became a dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    /// No actor is registered under the target name.
    UnknownTarget,
    /// The target has ended (terminated, deleted, or its supervisor is gone).
    DeadTarget,
    /// The target's inbox stayed full past the sender's deadline.
    InboxFull,
    /// Still queued when the target was killed or restarted.
    LeftInInbox,
    /// Being processed when the target crashed; quarantined here so the restarted actor does not crash on
    /// it again.
    Poison,
    /// Queued (or unanswered) when the device was lost.
    DeviceLost,
    /// Queued in a slot given up on because its actor never acknowledged a kill (the slot is quarantined).
    SlotQuarantined,
    /// Sent to an actor on another node of a cluster, which was lost before it answered.
    NodeLost,
}

/// How many reasons there are.
const REASONS: usize = DeadLetterReason::ALL.len();

impl DeadLetterReason {
    /// Every reason, for metrics and reports.
    pub const ALL: [DeadLetterReason; 8] = [
        Self::UnknownTarget,
        Self::DeadTarget,
        Self::InboxFull,
        Self::LeftInInbox,
        Self::Poison,
        Self::DeviceLost,
        Self::SlotQuarantined,
        Self::NodeLost,
    ];

    /// Short label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::UnknownTarget => "unknown_target",
            Self::DeadTarget => "dead_target",
            Self::InboxFull => "inbox_full",
            Self::LeftInInbox => "left_in_inbox",
            Self::Poison => "poison",
            Self::DeviceLost => "device_lost",
            Self::SlotQuarantined => "slot_quarantined",
            Self::NodeLost => "node_lost",
        }
    }

    /// The label with what it means, for messages: `poison (the actor failed while processing it)`.
    pub fn explain(self) -> String {
        let why = match self {
            Self::UnknownTarget => "no actor has that name",
            Self::DeadTarget => "the actor has ended",
            Self::InboxFull => "its inbox stayed full",
            Self::LeftInInbox => "still queued when the actor was killed or restarted",
            Self::Poison => "the actor failed while processing it; kept so its restart does not fail on it again",
            Self::DeviceLost => "the device was lost",
            Self::SlotQuarantined => "the actor's slot was quarantined",
            Self::NodeLost => "the actor's node was lost before it answered",
        };
        format!("{} ({why})", self.label())
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl From<UnroutableReason> for DeadLetterReason {
    fn from(r: UnroutableReason) -> Self {
        match r {
            UnroutableReason::NoRouter
            | UnroutableReason::NoDevice
            | UnroutableReason::NoSlot
            | UnroutableReason::Malformed => Self::UnknownTarget,
            UnroutableReason::NotRunning => Self::DeadTarget,
            UnroutableReason::DeviceGone => Self::DeviceLost,
            UnroutableReason::InboxFull => Self::InboxFull,
        }
    }
}

impl From<UndeliveredReason> for DeadLetterReason {
    fn from(r: UndeliveredReason) -> Self {
        match r {
            UndeliveredReason::LeftInInbox => Self::LeftInInbox,
            UndeliveredReason::InFlightAtCrash => Self::Poison,
            UndeliveredReason::DeviceLost => Self::DeviceLost,
            UndeliveredReason::Quarantined => Self::SlotQuarantined,
        }
    }
}

/// Who sent a dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The host (a handle's send or call).
    Host,
    /// A GPU actor, by slot (a kernel-to-kernel message).
    Slot(u32),
    /// A GPU actor on device `device` of the tree (a kernel-to-kernel message the host routed between devices).
    Routed {
        /// The sender's device index.
        device: u32,
        /// The sender's slot there.
        slot: u32,
    },
}

impl Origin {
    pub(crate) fn of(envelope: &Envelope) -> Self {
        match envelope.sender() {
            Endpoint::Host => Self::Host,
            Endpoint::Slot(slot) => Self::Slot(slot),
            Endpoint::Routed { device, slot } => Self::Routed { device, slot },
        }
    }
}

/// One undeliverable message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Sequence number, unique per queue (for redelivery).
    pub seq: u64,
    /// Why it was not delivered.
    pub reason: DeadLetterReason,
    /// Who sent it.
    pub origin: Origin,
    /// The target's registry name or child id, if known.
    pub target: Option<String>,
    /// The target's device slot, if it was a GPU actor.
    pub slot: Option<u32>,
    /// The incarnation (generation) of the GPU actor it was sent to, when the device handed it back.
    pub generation: Option<u32>,
    /// The device's failure code, when the actor failed on this very message ([`DeadLetterReason::Poison`]):
    /// as data, e.g. `DeviceCode::User(1222)` for a behaviour's own code.
    pub code: Option<DeviceCode>,
    /// The payload.
    pub payload: Vec<u8>,
    /// When it became a dead letter.
    pub at: SystemTime,
}

/// Where on the device a message handed back was: the slot, the incarnation it was sent to, and the failure
/// code if that incarnation failed on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceOrigin {
    /// The slot.
    pub slot: u32,
    /// The incarnation (generation).
    pub generation: u32,
    /// The failure code, for the message the actor failed on.
    pub code: Option<DeviceCode>,
}

/// What happens when the queue is full and another letter arrives. Either way the eviction is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Evict the oldest letter (keep the most recent history; the default).
    #[default]
    DropOldest,
    /// Refuse the new letter (keep the earliest history).
    DropNewest,
}

/// Counters of a dead-letter queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterStats {
    /// Letters received, by reason (indexed as [`DeadLetterReason::ALL`]).
    pub by_reason: [u64; REASONS],
    /// Letters evicted or refused because the queue was full.
    pub evicted: u64,
    /// Letters redelivered.
    pub redelivered: u64,
    /// Letters held now.
    pub held: usize,
}

impl DeadLetterStats {
    /// Letters received with `reason`.
    pub fn count(&self, reason: DeadLetterReason) -> u64 {
        self.by_reason[reason.index()]
    }

    /// Letters received in all.
    pub fn total(&self) -> u64 {
        self.by_reason.iter().sum()
    }
}

impl fmt::Display for DeadLetterStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in DeadLetterReason::ALL {
            write!(f, "{}={} ", r.label(), self.count(r))?;
        }
        write!(f, "evicted={} redelivered={} held={}", self.evicted, self.redelivered, self.held)
    }
}

struct Inner {
    capacity: usize,
    policy: OverflowPolicy,
    letters: Mutex<VecDeque<DeadLetter>>,
    next_seq: AtomicU64,
    by_reason: [AtomicU64; REASONS],
    evicted: AtomicU64,
    redelivered: AtomicU64,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<DeadLetter>>>,
}

/// A bounded dead-letter queue. Cheap to clone (clones share the queue).
#[derive(Clone)]
pub struct DeadLetters {
    inner: Arc<Inner>,
}

impl Default for DeadLetters {
    fn default() -> Self {
        Self::new(10_000, OverflowPolicy::DropOldest)
    }
}

impl DeadLetters {
    /// A queue holding at most `capacity` letters (at least 1), with `policy` on overflow.
    pub fn new(capacity: usize, policy: OverflowPolicy) -> Self {
        Self {
            inner: Arc::new(Inner {
                capacity: capacity.max(1),
                policy,
                letters: Mutex::new(VecDeque::new()),
                next_seq: AtomicU64::new(1),
                by_reason: Default::default(),
                evicted: AtomicU64::new(0),
                redelivered: AtomicU64::new(0),
                subscribers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Records an undeliverable message; returns its sequence number.
    pub fn push(
        &self,
        reason: DeadLetterReason,
        origin: Origin,
        target: Option<String>,
        slot: Option<u32>,
        payload: Vec<u8>,
    ) -> u64 {
        self.record(reason, origin, target, None, slot, payload)
    }

    /// Records a message the device handed back, with the incarnation it was sent to and the failure code if
    /// that incarnation failed on it; returns its sequence number.
    pub fn push_handed_back(
        &self,
        reason: DeadLetterReason,
        origin: Origin,
        target: Option<String>,
        device: DeviceOrigin,
        payload: Vec<u8>,
    ) -> u64 {
        self.record(reason, origin, target, Some(device), Some(device.slot), payload)
    }

    fn record(
        &self,
        reason: DeadLetterReason,
        origin: Origin,
        target: Option<String>,
        device: Option<DeviceOrigin>,
        slot: Option<u32>,
        payload: Vec<u8>,
    ) -> u64 {
        let inner = &self.inner;
        let seq = inner.next_seq.fetch_add(1, Ordering::Relaxed);
        let (generation, code) = device.map_or((None, None), |d| (Some(d.generation), d.code));
        let letter = DeadLetter { seq, reason, origin, target, slot, generation, code, payload, at: SystemTime::now() };
        inner.by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
        metrics::counter!("ringvisor_dead_letters_total", "reason" => reason.label()).increment(1);
        tracing::debug!(seq, reason = reason.label(), target = ?letter.target, slot = ?slot, "dead letter");
        lock(&inner.subscribers).retain(|tx| tx.send(letter.clone()).is_ok());
        let mut letters = lock(&inner.letters);
        if letters.len() >= inner.capacity {
            inner.evicted.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("ringvisor_dead_letters_evicted_total").increment(1);
            match inner.policy {
                OverflowPolicy::DropOldest => {
                    letters.pop_front();
                }
                OverflowPolicy::DropNewest => return seq,
            }
        }
        letters.push_back(letter);
        seq
    }

    /// Every letter from now on (subscribers see letters even when the queue evicts them).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<DeadLetter> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.inner.subscribers).push(tx);
        rx
    }

    /// The letters held now, oldest first.
    pub fn snapshot(&self) -> Vec<DeadLetter> {
        lock(&self.inner.letters).iter().cloned().collect()
    }

    /// Removes and returns every letter held.
    pub fn drain(&self) -> Vec<DeadLetter> {
        lock(&self.inner.letters).drain(..).collect()
    }

    /// Removes and returns the letter `seq`, if still held.
    pub fn take(&self, seq: u64) -> Option<DeadLetter> {
        let mut letters = lock(&self.inner.letters);
        let pos = letters.iter().position(|l| l.seq == seq)?;
        letters.remove(pos)
    }

    /// Puts a letter back (a failed redelivery), without counting it again.
    pub(crate) fn restore(&self, letter: DeadLetter) {
        let mut letters = lock(&self.inner.letters);
        let pos = letters.iter().position(|l| l.seq > letter.seq).unwrap_or(letters.len());
        letters.insert(pos, letter);
    }

    pub(crate) fn count_redelivered(&self) {
        self.inner.redelivered.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("ringvisor_dead_letters_redelivered_total").increment(1);
    }

    /// Counters.
    pub fn stats(&self) -> DeadLetterStats {
        let inner = &self.inner;
        let mut by_reason = [0u64; REASONS];
        for (slot, c) in by_reason.iter_mut().zip(inner.by_reason.iter()) {
            *slot = c.load(Ordering::Relaxed);
        }
        DeadLetterStats {
            by_reason,
            evicted: inner.evicted.load(Ordering::Relaxed),
            redelivered: inner.redelivered.load(Ordering::Relaxed),
            held: lock(&inner.letters).len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(q: &DeadLetters, n: u8) -> u64 {
        q.push(DeadLetterReason::DeadTarget, Origin::Host, Some("t".into()), None, vec![n])
    }

    /// Five letters (payloads 0..5) into a queue of two under `policy`: the payloads held, and the stats.
    fn five_into_two(policy: OverflowPolicy) -> (Vec<u8>, DeadLetterStats) {
        let q = DeadLetters::new(2, policy);
        for n in 0..5 {
            push(&q, n);
        }
        (q.snapshot().iter().map(|l| l.payload[0]).collect(), q.stats())
    }

    #[test]
    fn drop_oldest_keeps_the_newest_and_counts_evictions() {
        let (held, s) = five_into_two(OverflowPolicy::DropOldest);
        assert_eq!(held, vec![3, 4]);
        assert_eq!((s.evicted, s.total(), s.held), (3, 5, 2));
    }

    #[test]
    fn drop_newest_keeps_the_oldest() {
        let (held, s) = five_into_two(OverflowPolicy::DropNewest);
        assert_eq!(held, vec![0, 1]);
        assert_eq!((s.evicted, s.total(), s.held), (3, 5, 2));
    }

    #[test]
    fn subscribers_see_every_letter_and_take_removes_one() {
        let q = DeadLetters::new(1, OverflowPolicy::DropOldest);
        let mut rx = q.subscribe();
        let a = push(&q, 1);
        let b = push(&q, 2);
        assert_eq!(rx.try_recv().unwrap().seq, a);
        assert_eq!(rx.try_recv().unwrap().seq, b);
        assert!(q.take(a).is_none(), "evicted");
        assert_eq!(q.take(b).unwrap().payload, vec![2]);
        assert_eq!(q.stats().held, 0);
    }
}
