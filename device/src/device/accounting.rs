//! Exactly-once accounting: the host's copy of each slot's state machine, and how every message handed to the
//! device ends. Each message written to an inbox is, exactly once, processed by its actor (and answered unless
//! sent one-way) or *handed back*: read back from the inbox it was written to and returned as [`Undelivered`]
//! in the [`SlotEvent`] of the kill, restart, failure, quarantine, loss or shutdown that made it
//! undeliverable. `reported_until` marks how far a slot's inbox is accounted for; a restart in flight pins the
//! cells below its cutoff (the reclaim floor) until its outcome has been read back.
//!
//! - [`DeviceInner::apply_event`]: a device event updates the slot's host state and hands back what it ended;
//! - [`DeviceInner::hand_back_range`]: reads back an inbox range (the one place that does);
//! - [`DeviceInner::hand_back_queue`] / [`DeviceInner::hand_back_all_queues`]: a slot's (every slot's) queue,
//!   when the host, not the device, ends its incarnation (quarantine, loss, shutdown);
//! - [`DeviceInner::settle`]: counts what was handed back and fails the calls waiting for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{CommandWaiter, Device, DeviceInner};
use crate::bulk::{self, InboxBulk};
use crate::codes::{DeviceCode, EventKind, SlotState, UndeliveredReason};
use crate::error::DeviceError;
use crate::event::{DeviceEvent, SlotEvent, Undelivered};
use crate::layout::*;
use crate::message::Envelope;
use crate::ring;
use crate::sync::{lock, Completion};

pub(super) struct PendingOp {
    pub(super) cmd_id: u64,
    /// First inbox index of the new incarnation (Create/Restart), or the tail at submission.
    pub(super) cutoff: u32,
    /// A Create or Restart: messages from `cutoff` on belong to the incarnation it brings up.
    pub(super) recreate: bool,
    /// Restart: inbox cells from here on are not reusable until the outcome is read back.
    pub(super) floor: Option<u32>,
    pub(super) accepting_before: bool,
}

/// The host's bookkeeping of a slot, behind the slot's lock (which also serialises senders).
pub(super) struct SlotHost {
    pub(super) tail: u32,
    /// The device's inbox head as last read: room is computed from it, and the head (a line the device
    /// writes) is re-read only when it says the inbox is full, saving a cache-line transfer per send.
    pub(super) cached_head: u32,
    pub(super) generation: u32,
    pub(super) state: SlotState,
    pub(super) accepting: bool,
    pub(super) pending: Option<PendingOp>,
    /// Inbox messages below this index are accounted for (processed or reported undelivered).
    pub(super) reported_until: u32,
    pub(super) poison_reported: Option<u32>,
    /// The inbox tail when the host learned the actor had failed: a Restart of the failed slot keeps the
    /// messages sent from here on for the new incarnation (they were sent to an actor being restarted).
    pub(super) failed_tail: Option<u32>,
    pub(super) fault_flags: u32,
    pub(super) fault_seq: u32,
    /// Given up on (see [`Device::quarantine`]): refuses commands and messages until the device restarts.
    pub(super) quarantined: bool,
    /// A restart block 0 carries out under the host's grant, announced by the last Failed event: its cmd_id
    /// and outcome, until someone takes it (`Device::take_granted_restart`).
    pub(super) granted: Option<(u64, CommandWaiter)>,
    /// The slot's inbox bulk area (large messages): its bytes are in use exactly as long as their cells.
    pub(super) bulk: InboxBulk,
    /// Messages the host has written into this slot's inbox since the device opened (counted here, under the
    /// slot's lock, rather than in one device-wide counter that every producer's send would contend on).
    pub(super) sent: u64,
}

impl SlotHost {
    /// A slot never used.
    pub(super) fn dormant() -> Self {
        Self {
            tail: 0,
            cached_head: 0,
            generation: 0,
            state: SlotState::Dormant,
            accepting: false,
            pending: None,
            reported_until: 0,
            poison_reported: None,
            failed_tail: None,
            fault_flags: 0,
            fault_seq: 0,
            quarantined: false,
            granted: None,
            bulk: InboxBulk::default(),
            sent: 0,
        }
    }
}

/// The cmd_id of the restart block 0 carries out under a grant, bringing `slot` to `generation`.
pub(super) fn granted_cmd_id(slot: u32, generation: u32) -> u64 {
    RV_GRANTED_CMD | (u64::from(slot) << 32) | u64::from(generation)
}

impl Device {
    /// Gives up on `slot`, whose actor does not acknowledge commands (stuck inside its behaviour; a GPU block
    /// cannot be preempted): the slot refuses commands and messages with [`DeviceError::Quarantined`] until
    /// the device restarts, its queued messages are handed back (an [`EventKind::Quarantined`] event, reason
    /// [`UndeliveredReason::Quarantined`]), a command in flight on it fails with the same error, and the
    /// device code is told never to run it again (the wedge bit). Idempotent.
    pub fn quarantine(&self, slot: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        self.inner.quarantine(slot);
        Ok(())
    }

    /// Whether `slot` is quarantined.
    pub fn is_quarantined(&self, slot: u32) -> bool {
        slot < self.slot_count() && self.inner.slots[slot as usize].lock().quarantined
    }
}

impl DeviceInner {
    /// Why a slot that does not accept messages refuses this one.
    pub(super) fn refusal(&self, host: &SlotHost, slot: u32) -> DeviceError {
        if self.lost.load(Ordering::Acquire) {
            DeviceError::DeviceLost
        } else if host.quarantined {
            DeviceError::Quarantined { slot }
        } else {
            DeviceError::NotAccepting { slot, state: host.state }
        }
    }

    /// Drops the restart by grant announced in `host`, if any, with its waiter.
    pub(super) fn forget_granted_restart(&self, host: &mut SlotHost) {
        if let Some((cmd_id, _)) = host.granted.take() {
            lock(&self.commands).remove(&cmd_id);
        }
    }

    pub(super) fn apply_event(&self, raw: &RawEvent) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        let event = DeviceEvent::from_raw(raw);
        tracing::debug!(slot = event.slot, kind = ?event.kind, generation = event.generation, code = ?event.code, "device event");
        let mut undelivered = Vec::new();
        if event.slot < self.grid.slot_count() {
            let mut host = self.slots[event.slot as usize].lock();
            let pending_matches = host.pending.as_ref().is_some_and(|p| p.cmd_id == event.cmd_id && event.cmd_id != 0);
            match event.kind {
                EventKind::Created | EventKind::Restarted | EventKind::CreateFailed => {
                    let cutoff = match &host.pending {
                        Some(p) if pending_matches => p.cutoff,
                        // A granted restart: block 0 chose the cutoff (the tail it read).
                        _ if event.by_grant() => raw.inbox_start,
                        _ => self.grid.inbox_head(event.slot),
                    };
                    self.hand_back_incarnation(&mut host, &event, cutoff, &mut undelivered);
                    if !event.by_grant() {
                        // an incarnation the host started: a restart by grant still announced is about an older
                        // one, which no one will take over any more
                        self.forget_granted_restart(&mut host);
                    }
                    host.generation = event.generation;
                    host.poison_reported = None;
                    host.failed_tail = None;
                    host.accepting = true;
                }
                EventKind::Killed | EventKind::Drained => {
                    // Messages sent after a Create/Restart that is already in flight are for the next
                    // incarnation, not leftovers of this one.
                    let recreate = host.pending.as_ref().filter(|p| p.recreate && !pending_matches).map(|p| p.cutoff);
                    let cutoff = recreate.unwrap_or(host.tail);
                    self.hand_back_incarnation(&mut host, &event, cutoff, &mut undelivered);
                    if recreate.is_none() {
                        host.accepting = false;
                    }
                }
                EventKind::Failed => {
                    host.failed_tail = Some(host.tail);
                    // A restart by grant is announced until someone takes it: a later failure without one (the
                    // restarted incarnation crashing before its supervisor took it over) does not hide it, so the
                    // supervisor takes over that incarnation, finds it failed, and counts that crash too.
                    if event.restart_by_grant_follows() {
                        let cmd_id = granted_cmd_id(event.slot, event.generation.wrapping_add(1));
                        let waiter: CommandWaiter = Arc::new(Completion::new());
                        lock(&self.commands).insert(cmd_id, waiter.clone());
                        host.granted = Some((cmd_id, waiter));
                    }
                    if event.failed_index != RV_NO_INDEX && host.poison_reported.is_none() {
                        let env = self.inbox_envelope(event.slot, event.failed_index);
                        undelivered.push(Undelivered {
                            slot: event.slot,
                            generation: event.generation,
                            envelope: env,
                            reason: UndeliveredReason::InFlightAtCrash,
                        });
                        host.poison_reported = Some(event.failed_index);
                    }
                }
                EventKind::Draining => host.accepting = false,
                EventKind::Resumed => host.accepting = true,
                EventKind::Rejected => {
                    if let Some(p) = host.pending.as_ref().filter(|_| pending_matches) {
                        host.accepting = p.accepting_before;
                    }
                }
                // Host-made kinds never come from the device's ring.
                EventKind::Unknown(_) | EventKind::DeviceLost | EventKind::DeviceStopped | EventKind::Quarantined => {}
            }
            if event.kind != EventKind::Rejected {
                host.state = event.state;
            }
            if pending_matches {
                host.pending = None;
                self.grid.write_pending_op(event.slot, RV_OP_NONE);
            }
        }
        self.settle(&undelivered);
        let slot_event = SlotEvent { event, undelivered };
        let waiter = match slot_event.event.cmd_id {
            0 => None,
            cmd_id => lock(&self.commands).remove(&cmd_id),
        };
        let outcome = waiter.map(|w| {
            let result = match slot_event.event.kind {
                EventKind::Rejected => Err(DeviceError::Rejected {
                    slot: slot_event.event.slot,
                    code: slot_event.event.code.unwrap_or(DeviceCode::Other(0)),
                }),
                EventKind::CreateFailed => Err(DeviceError::CreateFailed {
                    slot: slot_event.event.slot,
                    code: slot_event.event.code.unwrap_or(DeviceCode::Other(0)),
                }),
                _ => Ok(slot_event.clone()),
            };
            (w, result)
        });
        // Subscribers first: one that subscribes after a command's waiter returns sees only later events.
        self.dispatch(slot_event);
        if let Some((w, result)) = outcome {
            w.complete(result);
        }
    }

    /// Reads back the messages in `[max(event.inbox_head, reported_until), cutoff)` that the previous
    /// incarnation never consumed, and marks them accounted for.
    pub(super) fn hand_back_incarnation(
        &self,
        host: &mut SlotHost,
        event: &DeviceEvent,
        cutoff: u32,
        out: &mut Vec<Undelivered>,
    ) {
        let slot = event.slot;
        if event.failed_index != RV_NO_INDEX
            && host.poison_reported.is_none()
            && !ring::at_or_after(event.failed_index, cutoff)
        {
            let env = self.inbox_envelope(slot, event.failed_index);
            let generation = host.generation;
            out.push(Undelivered { slot, generation, envelope: env, reason: UndeliveredReason::InFlightAtCrash });
            host.poison_reported = Some(event.failed_index);
        }
        if event.inbox_head == RV_NO_INDEX {
            host.reported_until = cutoff;
            return;
        }
        self.hand_back_range(host, slot, event.inbox_head, cutoff, UndeliveredReason::LeftInInbox, out);
    }

    /// Reads back the messages in `[max(head, reported_until), cutoff)` (all but a poison message already
    /// reported) as undelivered with `reason`, and marks everything below `cutoff` accounted for. A range
    /// wider than the inbox is not a real window: it is only marked.
    pub(super) fn hand_back_range(
        &self,
        host: &mut SlotHost,
        slot: u32,
        head: u32,
        cutoff: u32,
        reason: UndeliveredReason,
        out: &mut Vec<Undelivered>,
    ) {
        let mut start = head;
        if ring::at_or_after(host.reported_until, start) {
            start = host.reported_until;
        }
        if ring::at_or_after(cutoff, start) && ring::distance(start, cutoff) <= self.grid.config().inbox_capacity {
            let mut i = start;
            while i != cutoff {
                if host.poison_reported != Some(i) {
                    let envelope = self.inbox_envelope(slot, i);
                    out.push(Undelivered { slot, generation: host.generation, envelope, reason });
                }
                i = i.wrapping_add(1);
            }
        }
        host.reported_until = cutoff;
    }

    /// Reads back the message in inbox cell `index` of `slot`, a large one's bytes included (the host wrote
    /// them; a reference that names bytes outside the slot's area reads as an empty payload).
    pub(super) fn inbox_envelope(&self, slot: u32, index: u32) -> Envelope {
        let raw = self.grid.read_inbox(slot, index);
        let large = bulk::reference(&raw).map(|r| match bulk::offset(self.grid.config().bulk_bytes, r) {
            Some(offset) => self.grid.read_inbox_bulk(slot, offset, r.len),
            None => Vec::new(),
        });
        Envelope::from_raw_parts(&raw, large)
    }

    /// Stops `slot` accepting messages and hands back every message it has not consumed, as a host-made
    /// event of `kind` (the caller dispatches it).
    pub(super) fn hand_back_queue(
        &self,
        host: &mut SlotHost,
        slot: u32,
        kind: EventKind,
        reason: UndeliveredReason,
    ) -> SlotEvent {
        host.accepting = false;
        let head = self.grid.inbox_head(slot);
        let mut undelivered = Vec::new();
        self.hand_back_range(host, slot, head, host.tail, reason, &mut undelivered);
        let event = DeviceEvent {
            kind,
            slot,
            generation: host.generation,
            state: host.state,
            code: None,
            cmd_id: 0,
            messages_processed: self.grid.snapshot(slot).messages_processed,
            k2k_dropped: 0,
            time_ns: 0,
            inbox_head: head,
            failed_index: RV_NO_INDEX,
            op: RV_OP_NONE,
        };
        self.settle(&undelivered);
        SlotEvent { event, undelivered }
    }

    /// After the executor stopped: every slot's unconsumed messages are handed back, one host-made event of
    /// `kind` per slot that was ever used.
    pub(super) fn hand_back_all_queues(&self, kind: EventKind, reason: UndeliveredReason) {
        for slot in 0..self.grid.slot_count() {
            let mut host = self.slots[slot as usize].lock();
            let live = !matches!(host.state, SlotState::Dormant) || host.tail != host.reported_until;
            let event = self.hand_back_queue(&mut host, slot, kind, reason);
            drop(host);
            if live {
                self.dispatch(event);
            }
        }
    }

    /// Host-side quarantine of a slot (see [`Device::quarantine`]).
    pub(super) fn quarantine(&self, slot: u32) {
        let mut host = self.slots[slot as usize].lock();
        if host.quarantined {
            return;
        }
        host.quarantined = true;
        host.fault_flags |= RV_FAULT_WEDGE;
        self.grid.write_faults(slot, host.fault_flags, host.fault_seq);
        if let Some(p) = host.pending.take() {
            self.grid.write_pending_op(slot, RV_OP_NONE);
            if let Some(w) = lock(&self.commands).remove(&p.cmd_id) {
                w.complete(Err(DeviceError::Quarantined { slot }));
            }
        }
        let event = self.hand_back_queue(&mut host, slot, EventKind::Quarantined, UndeliveredReason::Quarantined);
        drop(host);
        tracing::warn!(slot, "slot quarantined");
        self.dispatch(event);
    }

    /// Counts messages handed back and fails the calls waiting for them.
    pub(super) fn settle(&self, undelivered: &[Undelivered]) {
        for u in undelivered {
            let counter = match u.reason {
                UndeliveredReason::InFlightAtCrash => &self.counters.in_flight,
                _ => &self.counters.left_in_inbox,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = self.calls.lock().take(u.envelope.correlation) {
                w.complete(Err(DeviceError::Undelivered { slot: u.slot, generation: u.generation, reason: u.reason }));
            }
        }
    }
}
