//! The host's side of a simulated run: what `Device` does with the rings, through the real shared-region layer
//! (`SharedGrid`), reduced to one thread and checked as it goes. It creates every slot at once, then calls,
//! arms crashes (`CrashNextMessage`, then more calls), restarts what failed with the cutoff the host would give
//! (its inbox tail: what was sent before the restart is the failed incarnation's, handed back), and polls the
//! event ring, the outboxes (through the blocks' doorbells) and block 0's heartbeat.

use super::{Plan, SimReport};
use crate::interleave::{Rng, Scheduler};
use crate::layout::*;
use crate::ring;
use crate::shared::SharedGrid;

/// What became of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Pending,
    Answered,
    /// The message its incarnation failed on.
    Crashed,
    /// Sent to an incarnation that failed before it got to it (below the restart's cutoff).
    HandedBack,
}

#[derive(Clone, Copy, Debug)]
struct Call {
    slot: u32,
    index: u32,
    fate: Fate,
    /// Sent after a `CrashNextMessage` was armed for the incarnation of this generation (which must fail on it
    /// or before it).
    after_crash_of: Option<u32>,
    /// Sent while the slot's stall of this number was in force (it must not be processed before the stall ends).
    during_stall: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A create or restart is in flight.
    Starting,
    Active,
    /// Its incarnation failed; a restart is to be submitted.
    Failed,
}

#[derive(Clone, Debug)]
struct SlotModel {
    phase: Phase,
    generation: u32,
    tail: u32,
    outbox_head: u32,
    /// The generation a `CrashNextMessage` is armed for.
    armed: Option<u32>,
    fault_seq: u32,
    /// The fault bits the host wrote last.
    fault_flags: u32,
    /// The stall in force, numbered (one after another).
    stall: Option<u32>,
    stalls: u32,
    /// Where the failed incarnation's messages start: its failed index + 1 (handed back below the cutoff).
    failed_from: Option<u32>,
    /// Calls of the current generation answered so far.
    answered_in_generation: u64,
}

/// The host's model of one run.
pub(crate) struct Model<'a> {
    grid: &'a SharedGrid,
    sched: &'a Scheduler,
    me: usize,
    rng: Rng,
    plan: Plan,
    blocks: u32,
    slots: Vec<SlotModel>,
    /// Every call, by correlation - 1.
    calls: Vec<Call>,
    event_head: u32,
    command_tail: u32,
    next_cmd_id: u64,
    doorbells: Vec<u32>,
    heartbeat: u64,
    heartbeat_since_ns: u64,
    report: SimReport,
}

type Violation = (String, Vec<String>);

/// Simulated time the host waits, after its last operation, for every call to be answered or handed back.
const SETTLE_NS: u64 = 50_000_000;
/// Longest a host waits between the calls that keep an actor busy and the crash it then injects (simulated).
const HOST_THINK_NS: u64 = 40_000;
/// Simulated time a host with nothing to read pauses between polls.
const POLL_PAUSE_NS: u64 = 2_000;

impl<'a> Model<'a> {
    pub(crate) fn new(
        grid: &'a SharedGrid,
        sched: &'a Scheduler,
        me: usize,
        seed: u64,
        plan: Plan,
        blocks: u32,
    ) -> Self {
        let slots = (0..plan.slots)
            .map(|_| SlotModel {
                phase: Phase::Starting,
                generation: 0,
                tail: 0,
                outbox_head: 0,
                armed: None,
                fault_seq: 0,
                fault_flags: 0,
                stall: None,
                stalls: 0,
                failed_from: None,
                answered_in_generation: 0,
            })
            .collect();
        Self {
            grid,
            sched,
            me,
            rng: Rng::new(seed ^ 0x5151_0000_7777_0001),
            report: SimReport { slots: plan.slots, ..Default::default() },
            plan,
            blocks,
            slots,
            calls: Vec::new(),
            event_head: 0,
            command_tail: 0,
            next_cmd_id: 1,
            doorbells: vec![0; blocks as usize],
            heartbeat: 0,
            heartbeat_since_ns: 0,
        }
    }

    fn violation(&self, what: String) -> Violation {
        (what, self.sched.recent())
    }

    /// The whole run: every slot created at once, the operations, then the settling.
    pub(crate) fn run(mut self) -> Result<SimReport, Violation> {
        for slot in 0..self.plan.slots {
            self.submit(RV_OP_CREATE, slot, 0)?;
        }
        for _ in 0..self.plan.operations {
            self.check_limit()?;
            let slot = self.rng.below(u64::from(self.plan.slots)) as u32;
            match self.rng.below(1000) as u32 {
                n if n < self.plan.crash_per_mille => {
                    // as a fault-injection test does it, into an actor that may be busy: calls, a while, the
                    // crash, then the message that trips it
                    for _ in 0..self.rng.below(8) {
                        self.call(slot);
                    }
                    let think = self.rng.below(HOST_THINK_NS);
                    self.sched.sleep(self.me, think);
                    self.arm_crash(slot);
                    self.call(slot);
                }
                n if n < self.plan.crash_per_mille + 60 => {
                    // a stall, and messages sent into it; or the end of one
                    if self.slots[slot as usize].stall.is_some() {
                        self.end_stall(slot);
                    } else {
                        self.stall(slot);
                        for _ in 0..1 + self.rng.below(3) {
                            self.call(slot);
                        }
                    }
                }
                n if n < 450 => self.call(slot),
                n if n < 700 => {
                    // a pipelined burst
                    for _ in 0..2 + self.rng.below(4) {
                        self.call(slot);
                    }
                }
                _ => {}
            }
            self.poll()?;
        }
        for slot in 0..self.plan.slots {
            self.end_stall(slot);
        }
        let deadline = self.sched.now_ns(self.me) + SETTLE_NS;
        while !self.settled() {
            self.check_limit()?;
            if self.sched.now_ns(self.me) > deadline {
                return Err(self.violation(self.unsettled()));
            }
            if !self.poll()? {
                self.sched.sleep(self.me, POLL_PAUSE_NS);
            }
        }
        Ok(self.report)
    }

    fn check_limit(&self) -> Result<(), Violation> {
        if self.sched.over_limit() {
            return Err(self.violation(format!("the run did not end within {} points", self.plan.policy.point_limit)));
        }
        Ok(())
    }

    fn settled(&self) -> bool {
        self.calls.iter().all(|c| c.fate != Fate::Pending) && self.slots.iter().all(|s| s.phase == Phase::Active)
    }

    fn unsettled(&self) -> String {
        let hung: Vec<String> = self
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.fate == Fate::Pending)
            .take(5)
            .map(|(i, c)| format!("call {} (slot {}, index {})", i + 1, c.slot, c.index))
            .collect();
        let phases: Vec<String> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.phase != Phase::Active)
            .take(5)
            .map(|(i, s)| format!("slot {i} {:?} gen {}", s.phase, s.generation))
            .collect();
        format!(
            "not settled {} ms after the last operation (a hung call or slot): calls neither answered nor handed \
             back: {hung:?}; slots not running: {phases:?}",
            SETTLE_NS / 1_000_000
        )
    }

    /// Submits a command. The ring has room for one command per slot and more, and a slot has one in flight at
    /// most (a create, or the restart of a failed incarnation).
    fn submit(&mut self, op: u32, slot: u32, cutoff: u32) -> Result<(), Violation> {
        if ring::distance(self.grid.command_head(), self.command_tail) >= self.grid.config().command_capacity {
            return Err(self.violation("the command ring is full with one command per slot at most".into()));
        }
        let echo = 1; // the built-in `echo` (BUILTIN_BEHAVIOURS)
        let cmd = RawCommand {
            op,
            slot,
            expected_generation: self.slots[slot as usize].generation,
            behaviour: echo,
            cmd_id: self.next_cmd_id,
            inbox_index: cutoff,
            init_len: 0,
            init: [0; RV_INIT_BYTES as usize],
        };
        self.next_cmd_id += 1;
        self.grid.write_command(self.command_tail, &cmd);
        self.command_tail = self.command_tail.wrapping_add(1);
        self.grid.publish_command_tail(self.command_tail);
        self.slots[slot as usize].phase = Phase::Starting;
        Ok(())
    }

    /// Sends a call to `slot` if its inbox has room.
    fn call(&mut self, slot: u32) {
        let s = &self.slots[slot as usize];
        if ring::distance(self.grid.inbox_head(slot), s.tail) >= self.grid.config().inbox_capacity {
            return;
        }
        let correlation = self.calls.len() as u64 + 1;
        let mut payload = [0u8; RV_PAYLOAD_BYTES as usize];
        payload[..8].copy_from_slice(&correlation.to_le_bytes());
        let env = RawEnvelope {
            kind: RV_KIND_USER as u8,
            flags: 0,
            payload_len: 8,
            source: RV_HOST_ENDPOINT,
            destination: slot,
            generation: 0,
            correlation,
            hlc: 0,
            payload,
        };
        let index = s.tail;
        let (after_crash_of, during_stall) = (s.armed, s.stall);
        self.grid.write_inbox(slot, index, &env);
        let s = &mut self.slots[slot as usize];
        s.tail = s.tail.wrapping_add(1);
        self.grid.publish_inbox_tail(slot, s.tail);
        self.calls.push(Call { slot, index, fate: Fate::Pending, after_crash_of, during_stall });
        self.report.calls += 1;
    }

    /// Arms a `CrashNextMessage` for `slot`'s running incarnation (as `Device::inject` writes it).
    fn arm_crash(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.phase != Phase::Active || s.armed.is_some() {
            return;
        }
        s.fault_seq += 1;
        s.armed = Some(s.generation);
        s.fault_flags |= RV_FAULT_CRASH_NEXT;
        let (flags, seq) = (s.fault_flags, s.fault_seq);
        self.grid.write_faults(slot, flags, seq);
    }

    /// Stalls `slot` (as `SlotFault::Stall` does): what is sent from now on waits for the stall's end.
    fn stall(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.stalls += 1;
        s.stall = Some(s.stalls);
        s.fault_flags |= RV_FAULT_STALL;
        let (flags, seq) = (s.fault_flags, s.fault_seq);
        self.grid.write_faults(slot, flags, seq);
    }

    /// Ends `slot`'s stall, if one is in force.
    fn end_stall(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.stall.take().is_none() {
            return;
        }
        s.fault_flags &= !RV_FAULT_STALL;
        let (flags, seq) = (s.fault_flags, s.fault_seq);
        self.grid.write_faults(slot, flags, seq);
    }

    /// Reads what the device published: events, replies (of the blocks whose doorbell rang), the heartbeat.
    /// Returns whether anything was read.
    fn poll(&mut self) -> Result<bool, Violation> {
        let mut read = false;
        let tail = self.grid.event_tail();
        while self.event_head != tail {
            let event = self.grid.read_event(self.event_head);
            self.event_head = self.event_head.wrapping_add(1);
            self.grid.release_events(self.event_head);
            self.on_event(&event)?;
            read = true;
        }
        for block in 1..self.blocks {
            let bell = self.grid.doorbell(block);
            if bell == self.doorbells[block as usize] {
                continue;
            }
            self.doorbells[block as usize] = bell;
            let first = (block - 1) * self.plan.slots_per_block;
            for slot in first..(first + self.plan.slots_per_block).min(self.plan.slots) {
                read |= self.read_outbox(slot)?;
            }
        }
        for slot in 0..self.plan.slots {
            if self.slots[slot as usize].phase == Phase::Failed {
                let cutoff = self.slots[slot as usize].tail;
                self.submit(RV_OP_RESTART, slot, cutoff)?;
                read = true;
            }
        }
        self.watch_heartbeat()?;
        Ok(read)
    }

    fn watch_heartbeat(&mut self) -> Result<(), Violation> {
        let (beat, _, _) = self.grid.block0_counters();
        let now = self.sched.now_ns(self.me);
        if beat != self.heartbeat {
            self.heartbeat = beat;
            self.heartbeat_since_ns = now;
        } else if now - self.heartbeat_since_ns > self.plan.lost_after_ns {
            return Err(self.violation(format!(
                "block 0's heartbeat stood still for {} us (the loss detector's window is {} us) while block 0 \
                 was working: a working device would be declared lost",
                (now - self.heartbeat_since_ns) / 1000,
                self.plan.lost_after_ns / 1000
            )));
        }
        Ok(())
    }

    fn read_outbox(&mut self, slot: u32) -> Result<bool, Violation> {
        let tail = self.grid.outbox_tail(slot);
        let mut read = false;
        while self.slots[slot as usize].outbox_head != tail {
            let head = self.slots[slot as usize].outbox_head;
            let reply = self.grid.read_outbox(slot, head);
            self.slots[slot as usize].outbox_head = head.wrapping_add(1);
            self.grid.release_outbox(slot, head.wrapping_add(1));
            self.on_reply(slot, &reply)?;
            read = true;
        }
        Ok(read)
    }

    fn on_reply(&mut self, slot: u32, reply: &RawEnvelope) -> Result<(), Violation> {
        let correlation = reply.correlation;
        let Some(call) = correlation.checked_sub(1).and_then(|i| self.calls.get(i as usize)).copied() else {
            return Err(self.violation(format!("slot {slot} replied to correlation {correlation}, which no call had")));
        };
        if call.slot != slot {
            return Err(self.violation(format!("call {correlation} to slot {} was answered by slot {slot}", call.slot)));
        }
        if call.fate != Fate::Pending {
            return Err(self.violation(format!(
                "call {correlation} (slot {slot}, index {}) was answered after it was {:?}",
                call.index, call.fate
            )));
        }
        if u32::from(reply.kind) != RV_KIND_REPLY {
            return Err(self.violation(format!("call {correlation} was answered with kind {}", reply.kind)));
        }
        if call.after_crash_of == Some(reply.generation) {
            return Err(self.violation(format!(
                "call {correlation} (slot {slot}, index {}) was sent after a CrashNextMessage for generation {} \
                 and answered by that generation: the crash meant for it was missed",
                call.index, reply.generation
            )));
        }
        if call.during_stall.is_some() && call.during_stall == self.slots[slot as usize].stall {
            return Err(self.violation(format!(
                "call {correlation} (slot {slot}, index {}) was sent into stall {} and answered while that stall \
                 was still in force",
                call.index,
                call.during_stall.unwrap_or_default()
            )));
        }
        // A reply implies its message is consumed and counted.
        let head = self.grid.inbox_head(slot);
        if !ring::after(head, call.index) {
            return Err(self.violation(format!(
                "the reply to call {correlation} (slot {slot}, index {}) was read while the inbox head was still \
                 {head}: its message not yet consumed",
                call.index
            )));
        }
        let s = &mut self.slots[slot as usize];
        if reply.generation == s.generation {
            s.answered_in_generation += 1;
            let (generation, _, processed) = self.grid.activity(slot);
            let answered = self.slots[slot as usize].answered_in_generation;
            if generation == reply.generation && processed < answered {
                return Err(self.violation(format!(
                    "slot {slot} counted {processed} messages processed after its reply to the {answered}th call \
                     of generation {generation}"
                )));
            }
        }
        self.calls[correlation as usize - 1].fate = Fate::Answered;
        self.report.answered += 1;
        Ok(())
    }

    fn on_event(&mut self, e: &RawEvent) -> Result<(), Violation> {
        let slot = e.slot;
        let Some(mut s) = self.slots.get(slot as usize).cloned() else {
            return Err(self.violation(format!("an event for slot {slot}, which does not exist: {e:?}")));
        };
        match e.kind {
            RV_EVT_CREATED | RV_EVT_RESTARTED => {
                if s.phase != Phase::Starting {
                    return Err(self.violation(format!("slot {slot} started with no command in flight: {e:?}")));
                }
                if s.generation != 0 && !ring::after(e.generation, s.generation) {
                    return Err(self.violation(format!(
                        "slot {slot}'s generation went from {} to {}",
                        s.generation, e.generation
                    )));
                }
                s.generation = e.generation;
                s.phase = Phase::Active;
                s.answered_in_generation = 0;
                if let Some(from) = s.failed_from.take() {
                    // what the failed incarnation left below the cutoff is handed back
                    let cutoff = e.inbox_start;
                    for c in self.calls.iter_mut().filter(|c| c.slot == slot) {
                        if ring::at_or_after(c.index, from) && ring::after(cutoff, c.index) {
                            if c.fate != Fate::Pending {
                                let what = format!(
                                    "a call to slot {slot} at index {} was handed back after it was {:?}",
                                    c.index, c.fate
                                );
                                return Err((what, self.sched.recent()));
                            }
                            c.fate = Fate::HandedBack;
                            self.report.handed_back += 1;
                        }
                    }
                }
            }
            RV_EVT_FAILED => {
                if s.phase != Phase::Active && s.phase != Phase::Starting {
                    return Err(self.violation(format!("slot {slot} failed while {:?}: {e:?}", s.phase)));
                }
                if s.armed != Some(e.generation) {
                    return Err(self.violation(format!(
                        "slot {slot}'s generation {} failed with no crash armed for it: {e:?}",
                        e.generation
                    )));
                }
                s.armed = None;
                s.phase = Phase::Failed;
                s.failed_from = Some(e.failed_index.wrapping_add(1));
                self.report.crashes += 1;
                let Some(c) = self.calls.iter_mut().find(|c| c.slot == slot && c.index == e.failed_index) else {
                    return Err(
                        self.violation(format!("slot {slot} failed on index {}, which no call had", e.failed_index))
                    );
                };
                if c.fate != Fate::Pending {
                    let (index, fate) = (c.index, c.fate);
                    return Err(self.violation(format!("slot {slot} failed on index {index}, a call already {fate:?}")));
                }
                c.fate = Fate::Crashed;
            }
            _ => return Err(self.violation(format!("an event the host's commands do not explain: {e:?}"))),
        }
        self.slots[slot as usize] = s;
        Ok(())
    }
}
