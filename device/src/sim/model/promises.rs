//! The promises of the protocol, checked as the host's model reads each event and reply (see `sim::run`): what a
//! reply, an event or block 0's heartbeat may say given what the host did, and the hand-backs they imply.

use super::{Fate, Model, Phase, Violation};
use crate::layout::*;
use crate::ring;
use crate::sim::LOST_AFTER_NS;

impl Model<'_> {
    /// How long block 0's heartbeat has stood still, if longer than the loss detector's window (not counting
    /// a device stall the host injected).
    pub(super) fn heartbeat_stale(&mut self) -> Option<u64> {
        let (beat, _, _) = self.grid.block0_counters();
        let now = self.sched.now_ns(self.me);
        if beat != self.heartbeat || self.device_stall.is_some() {
            self.heartbeat = beat;
            self.heartbeat_since_ns = now;
        }
        Some(now - self.heartbeat_since_ns).filter(|&stale| stale > LOST_AFTER_NS)
    }

    /// The loss detector, while the device works: it must never fire.
    pub(super) fn watch_heartbeat(&mut self) -> Result<(), Violation> {
        if self.report.lost {
            return Ok(());
        }
        match self.heartbeat_stale() {
            Some(stale) => Err(self.violation(format!(
                "block 0's heartbeat stood still for {} us (the loss detector's window is {} us) while block 0 \
                 was working: a working device would be declared lost",
                stale / 1000,
                LOST_AFTER_NS / 1000
            ))),
            None => Ok(()),
        }
    }

    /// A reply or error answer read from `slot`'s outbox.
    pub(super) fn on_reply(&mut self, slot: u32, reply: &RawEnvelope) -> Result<(), Violation> {
        let correlation = reply.correlation;
        let Some(call) = correlation.checked_sub(1).and_then(|i| self.calls.get(i as usize)).copied() else {
            return Err(self.violation(format!("slot {slot} replied to correlation {correlation}, which no call had")));
        };
        let what = format!("call {correlation} (slot {}, index {})", call.slot, call.index);
        // a forwarded call is answered by its target (or, with an error, by the slot it was sent to)
        let from_target = call.forwarded_to == Some(slot);
        if call.fate != Fate::Pending || (call.slot != slot && !from_target) {
            return Err(self.violation(format!("{what} was answered by slot {slot} after it was {:?}", call.fate)));
        }
        let generation = reply.generation;
        let kind = u32::from(reply.kind);
        let code = i32::from_le_bytes([reply.payload[0], reply.payload[1], reply.payload[2], reply.payload[3]]);
        match (kind, from_target) {
            (RV_KIND_ERROR, false) if code == RV_ERR_BAD_ENVELOPE => {
                if self.slots[slot as usize].corrupt.map(|(g, _)| g) != Some(generation) {
                    return Err(self.violation(format!(
                        "{what} was answered with error {code} by generation {generation}, which no fault explains"
                    )));
                }
                self.slots[slot as usize].corrupt = None;
            }
            // the target was not running when the call was forwarded (an error from the slot called), or was
            // restarted or ended with the forwarded message still queued (from the target, by block 0)
            (RV_KIND_ERROR, _) if code == RV_ERR_TARGET_GONE && call.forwarded_to.is_some() => {}
            (RV_KIND_REPLY, false) if call.forwarded_to.is_none() => self.check_answer(&call, &what, generation)?,
            (RV_KIND_REPLY, true) => self.check_stalls(&call, &what)?,
            _ => {
                return Err(self.violation(format!(
                    "{what} was answered by slot {slot} with kind {kind} (code {code}), which nothing explains"
                )))
            }
        }
        // A reply implies its message is consumed (a forwarded one: by the slot it was sent to).
        let head = self.grid.inbox_head(call.slot);
        if !ring::after(head, call.index) {
            return Err(self.violation(format!(
                "the reply (kind {kind}) to {what} was read while the inbox head was still {head}: its message not \
                 yet consumed"
            )));
        }
        self.calls[correlation as usize - 1].fate = Fate::Answered;
        self.report.answered += 1;
        Ok(())
    }

    /// The promises a behaviour's answer to a call keeps, answered by `generation` of the slot called: the faults
    /// injected before it was sent acted first, and the answer is counted.
    fn check_answer(&mut self, call: &super::Call, what: &str, generation: u32) -> Result<(), Violation> {
        let slot = call.slot;
        let s = self.slots[slot as usize].clone();
        if call.after_crash_of == Some(generation) {
            return Err(self.violation(format!(
                "{what} was sent after a CrashNextMessage for generation {generation} and answered by that \
                 generation: the crash meant for it was missed"
            )));
        }
        if call.after_corrupt_of.is_some() && s.corrupt == call.after_corrupt_of.map(|seq| (generation, seq)) {
            return Err(self.violation(format!(
                "{what} was sent after a CorruptNextMessage for generation {generation} and answered normally by it \
                 before any message was corrupted"
            )));
        }
        self.check_stalls(call, what)?;
        if generation == s.generation {
            self.slots[slot as usize].answered_in_generation += 1;
        }
        // The count is read beside the generation, not with it: only while no restart can be under way (none asked
        // for, no crash armed that a granted restart could follow) does it say which incarnation's it is.
        if generation == s.generation && s.phase == Phase::Active && s.crash.is_none() {
            let (now_generation, _, processed) = self.grid.activity(slot);
            let answered = self.slots[slot as usize].answered_in_generation;
            if now_generation == generation && processed < answered {
                return Err(self.violation(format!(
                    "slot {slot} counted {processed} messages processed after its reply to the {answered}th call of \
                     generation {generation}"
                )));
            }
        }
        Ok(())
    }

    /// A call sent into a stall (of the slot called, or of the device) is not answered while that stall lasts.
    fn check_stalls(&self, call: &super::Call, what: &str) -> Result<(), Violation> {
        if call.during_stall.is_some() && call.during_stall == self.slots[call.slot as usize].stall {
            return Err(self.violation(format!("{what} was sent into a stall and answered while it was in force")));
        }
        if call.during_device_stall.is_some() && call.during_device_stall == self.device_stall {
            return Err(self
                .violation(format!("{what} was sent into a stall of the device and answered while it was in force")));
        }
        Ok(())
    }

    /// Marks the calls to `slot` in `[from, to)` handed back (those not crashed on): each must still be pending.
    pub(super) fn hand_back(&mut self, slot: u32, from: u32, to: u32) -> Result<(), Violation> {
        for i in 0..self.calls.len() {
            let c = self.calls[i];
            if c.slot != slot || !ring::at_or_after(c.index, from) || !ring::after(to, c.index) {
                continue;
            }
            match c.fate {
                Fate::Pending => {
                    self.calls[i].fate = Fate::HandedBack;
                    self.report.handed_back += 1;
                }
                Fate::Answered => {
                    return Err(self.violation(format!(
                        "call {} (slot {slot}, index {}) was handed back after it was answered",
                        i + 1,
                        c.index
                    )))
                }
                Fate::Crashed | Fate::HandedBack | Fate::Lost => {}
            }
        }
        Ok(())
    }

    pub(super) fn on_event(&mut self, e: &RawEvent) -> Result<(), Violation> {
        let slot = e.slot;
        let Some(mut s) = self.slots.get(slot as usize).cloned() else {
            return Err(self.violation(format!("an event for slot {slot}, which does not exist: {e:?}")));
        };
        let unexplained =
            |m: &Self| Err(m.violation(format!("slot {slot} in {:?}: an event not explained: {e:?}", s.phase)));
        match e.kind {
            RV_EVT_CREATED | RV_EVT_RESTARTED => {
                if s.phase != Phase::Starting {
                    return unexplained(self);
                }
                if s.generation != 0 && !ring::after(e.generation, s.generation) {
                    return Err(self.violation(format!(
                        "slot {slot}'s generation went from {} to {}",
                        s.generation, e.generation
                    )));
                }
                // what the previous incarnation left unconsumed below the new one's start is handed back
                if e.inbox_head != RV_NO_INDEX {
                    self.hand_back(slot, e.inbox_head, e.inbox_start)?;
                }
                s.generation = e.generation;
                s.phase = Phase::Active;
                s.answered_in_generation = 0;
                (s.crash, s.corrupt, s.granted) = (None, None, false); // a new incarnation acknowledges both
            }
            RV_EVT_FAILED => {
                if s.phase != Phase::Active || s.crash != Some(e.generation) {
                    return unexplained(self);
                }
                let granted = e.op == RV_OP_RESTART;
                if granted && !s.granted {
                    return Err(self.violation(format!("slot {slot} was restarted in place with no grant: {e:?}")));
                }
                s.crash = None;
                s.phase = if granted { Phase::Starting } else { Phase::Failed };
                self.report.crashes += 1;
                let Some(i) = self.calls.iter().position(|c| c.slot == slot && c.index == e.failed_index) else {
                    return Err(
                        self.violation(format!("slot {slot} failed on index {}, which no call had", e.failed_index))
                    );
                };
                if self.calls[i].fate != Fate::Pending {
                    return Err(self.violation(format!(
                        "slot {slot} failed on index {}, a call already {:?}",
                        e.failed_index, self.calls[i].fate
                    )));
                }
                self.calls[i].fate = Fate::Crashed;
            }
            RV_EVT_DRAINING if s.phase == Phase::Ending => {}
            RV_EVT_KILLED | RV_EVT_DRAINED if s.phase == Phase::Ending => {
                self.hand_back(slot, e.inbox_head, s.tail)?;
                s.phase = Phase::Ended;
            }
            _ => return unexplained(self),
        }
        self.slots[slot as usize] = s;
        Ok(())
    }
}
