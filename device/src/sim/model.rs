//! The host's side of a simulated run: what `Device` does with the rings, through the real shared-region layer
//! (`SharedGrid`), reduced to one thread and checked as it goes. It creates every slot at once, then calls
//! (alone and in pipelined bursts), injects faults as the chaos harness does (a crash or a corruption of the next
//! message into a busy actor, with or without a restart grant; a stall of a slot or of the whole device), kills
//! and drains, restarts what failed and recreates what ended with the cutoff the host would give (its inbox tail),
//! and polls the event ring, the outboxes (through the blocks' doorbells) and block 0's heartbeat. Each event and
//! reply is checked against what the host did (see `sim::run`).

use super::{Plan, SimReport, LOST_AFTER_NS};
use crate::interleave::{Rng, Scheduler, Side};
use crate::layout::*;
use crate::ring;
use crate::shared::SharedGrid;

mod promises;

/// What became of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Pending,
    /// Replied to (with the behaviour's reply, or an error for an injected corruption).
    Answered,
    /// The message its incarnation failed on.
    Crashed,
    /// Left to an incarnation that ended before it got to it.
    HandedBack,
    /// Consumed by a device that was lost before it answered (a dead letter).
    Lost,
}

#[derive(Clone, Copy, Debug)]
struct Call {
    slot: u32,
    index: u32,
    /// For a call the actor forwards to another slot (kernel to kernel), the slot that answers it.
    forwarded_to: Option<u32>,
    fate: Fate,
    /// Sent after a `CrashNextMessage` was armed for the incarnation of this generation (which must fail on it
    /// or before it).
    after_crash_of: Option<u32>,
    /// Sent after the `CorruptNextMessage` of this fault sequence number was armed (the incarnation it was armed
    /// for must answer it, or an earlier message, with the corruption's error first).
    after_corrupt_of: Option<u32>,
    /// Sent while the slot's stall of this number was in force (not to be processed before the stall ends).
    during_stall: Option<u32>,
    /// Sent while the device's stall of this number was in force.
    during_device_stall: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A create or restart is in flight.
    Starting,
    Active,
    /// Its incarnation failed; a restart is to be submitted.
    Failed,
    /// A kill or a drain is in flight.
    Ending,
    /// Killed or drained; a create is to be submitted.
    Ended,
}

#[derive(Clone, Debug)]
struct SlotModel {
    phase: Phase,
    generation: u32,
    tail: u32,
    outbox_head: u32,
    /// The generation a `CrashNextMessage` is armed for.
    crash: Option<u32>,
    /// The generation a `CorruptNextMessage` is armed for, and its fault sequence number.
    corrupt: Option<(u32, u32)>,
    /// Whether block 0 may restart the running incarnation in place if it fails (a restart grant).
    granted: bool,
    fault_seq: u32,
    /// The fault bits the host wrote last.
    fault_flags: u32,
    /// The stall in force, numbered (one after another).
    stall: Option<u32>,
    stalls: u32,
    /// Calls of the current generation answered by the behaviour so far.
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
    /// The device stall in force, numbered.
    device_stall: Option<u32>,
    device_stalls: u32,
    report: SimReport,
}

type Violation = (String, Vec<String>);

/// Simulated time the host waits, after its last operation, for every call to be answered or handed back.
const SETTLE_NS: u64 = 50_000_000;

/// The built-in `test` (BUILTIN_BEHAVIOURS) and two of its ops (`kernels/behaviours/test.cu`).
const TEST: u32 = 4;
const TEST_ECHO: u32 = 1;
const TEST_FORWARD: u32 = 4;

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
                crash: None,
                corrupt: None,
                granted: false,
                fault_seq: 0,
                fault_flags: 0,
                stall: None,
                stalls: 0,
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
            device_stall: None,
            device_stalls: 0,
        }
    }

    /// Prints a line of the host's trace (`Plan::trace`), stamped with the host's simulated clock.
    fn trace(&self, line: impl FnOnce() -> String) {
        if self.plan.trace {
            eprintln!("{:>10} ns  host    {}", self.sched.now_ns(self.me), line());
        }
    }

    fn violation(&self, what: String) -> Violation {
        (what, self.sched.recent())
    }

    /// The whole run: every slot created at once (a burst of commands), the operations, then the settling.
    pub(crate) fn run(mut self) -> Result<SimReport, Violation> {
        for slot in 0..self.plan.slots {
            self.submit(RV_OP_CREATE, slot, 0)?;
        }
        for n in 0..self.plan.operations {
            self.check_limit()?;
            if self.plan.lose_at == Some(n) {
                self.lose_device()?;
                return Ok(self.report);
            }
            self.operation()?;
            self.poll()?;
        }
        self.end_device_stall();
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
                self.sched.sleep(self.me, self.plan.poll_pause_ns);
            }
        }
        Ok(self.report)
    }

    /// One operation, drawn: calls, a burst of them, a crash or corruption injected into a busy actor, a stall
    /// of the slot or the device, a kill, a drain.
    fn operation(&mut self) -> Result<(), Violation> {
        let slot = self.rng.below(u64::from(self.plan.slots)) as u32;
        let quiet = {
            let s = &self.slots[slot as usize];
            s.phase == Phase::Active && s.crash.is_none() && s.corrupt.is_none() && s.stall.is_none()
        };
        let m = self.plan.mix;
        let weights = [m.call, m.burst, m.crash, m.corrupt, m.stall, m.kill, m.drain, m.device_stall, m.forward];
        let mut n = self.rng.below(weights.iter().sum());
        let kind = weights.iter().position(|&w| {
            let here = n < w;
            n = n.saturating_sub(w);
            here
        });
        match kind {
            Some(0) => self.call(slot),
            Some(1) => {
                // a pipelined burst
                for _ in 0..2 + self.rng.below(4) {
                    self.call(slot);
                }
            }
            Some(2) => {
                // as a fault-injection test does it, into an actor that may be busy: calls, a while, the crash
                // (granting block 0 a restart in place, or not), then the message that trips it
                self.keep_busy(slot)?;
                let grant = self.rng.chance(500);
                self.arm(slot, RV_FAULT_CRASH_NEXT, grant);
                self.call(slot);
            }
            Some(3) => {
                self.keep_busy(slot)?;
                self.arm(slot, RV_FAULT_CORRUPT_NEXT, false);
                self.call(slot);
            }
            Some(4) => {
                if self.slots[slot as usize].stall.is_some() {
                    self.end_stall(slot);
                } else {
                    self.keep_busy(slot)?;
                    self.stall(slot);
                    for _ in 0..1 + self.rng.below(3) {
                        self.call(slot);
                    }
                }
            }
            Some(8) => {
                // a call forwarded kernel to kernel, or a burst of them, to another slot
                let to = (slot + 1 + self.rng.below(u64::from(self.plan.slots) - 1) as u32) % self.plan.slots;
                for _ in 0..1 + self.rng.below(3) {
                    self.forward(slot, to);
                }
            }
            Some(5) | Some(6) => {
                // a kill or a drain of a running actor with nothing injected (the host refuses messages from now)
                if quiet {
                    let op = if kind == Some(5) { RV_OP_KILL } else { RV_OP_DRAIN };
                    self.submit(op, slot, self.slots[slot as usize].tail)?;
                    self.slots[slot as usize].phase = Phase::Ending;
                }
            }
            _ => {
                if self.device_stall.is_some() {
                    self.end_device_stall();
                } else {
                    self.keep_busy(slot)?;
                    self.device_stalls += 1;
                    self.device_stall = Some(self.device_stalls);
                    self.grid.write_device_faults(RV_DEVICE_STALL);
                    for _ in 0..1 + self.rng.below(3) {
                        self.call(slot);
                    }
                }
            }
        }
        Ok(())
    }

    /// The device is lost between two of its accesses (every block frozen where it stands). The host must notice
    /// from block 0's heartbeat alone, within the loss detector's window and its polling, and then do what
    /// `Device` does: ask the grid to terminate, read what the device did publish, hand back what it had not
    /// consumed, and fail the calls it consumed and never answered.
    fn lose_device(&mut self) -> Result<(), Violation> {
        self.end_device_stall();
        self.sched.freeze(Side::Device);
        self.report.lost = true;
        let frozen_at = self.sched.now_ns(self.me);
        loop {
            if self.sched.now_ns(self.me) - frozen_at > 4 * LOST_AFTER_NS {
                return Err(self.violation("a lost device was not noticed: block 0's heartbeat still moved".into()));
            }
            if !self.poll()? {
                self.sched.sleep(self.me, self.plan.poll_pause_ns);
            }
            if self.heartbeat_stale().is_some() {
                break;
            }
        }
        self.grid.request_terminate();
        self.poll()?;
        for slot in 0..self.plan.slots {
            let head = self.grid.inbox_head(slot);
            let tail = self.slots[slot as usize].tail;
            self.hand_back(slot, head, tail)?;
        }
        for c in self.calls.iter_mut().filter(|c| c.fate == Fate::Pending) {
            c.fate = Fate::Lost;
            self.report.dead += 1;
        }
        Ok(())
    }

    /// Before a fault: calls that keep `slot`'s actor busy, then a while (polling), so that the fault lands at
    /// any moment of the actor's steps, as a fault injected into a working system does.
    fn keep_busy(&mut self, slot: u32) -> Result<(), Violation> {
        for _ in 0..self.rng.below(8) {
            self.call(slot);
        }
        let think = self.rng.below(self.plan.think_ns);
        self.wait(think)
    }

    /// Waits `ns` of simulated time, polling as the poller does meanwhile.
    fn wait(&mut self, ns: u64) -> Result<(), Violation> {
        let until = self.sched.now_ns(self.me) + ns;
        while self.sched.now_ns(self.me) < until {
            if !self.poll()? {
                self.sched.sleep(self.me, self.plan.poll_pause_ns);
            }
        }
        Ok(())
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
    /// most.
    fn submit(&mut self, op: u32, slot: u32, cutoff: u32) -> Result<(), Violation> {
        if ring::distance(self.grid.command_head(), self.command_tail) >= self.grid.config().command_capacity {
            return Err(self.violation("the command ring is full with one command per slot at most".into()));
        }
        let cmd = RawCommand {
            op,
            slot,
            expected_generation: self.slots[slot as usize].generation,
            behaviour: TEST,
            cmd_id: self.next_cmd_id,
            inbox_index: cutoff,
            init_len: 0,
            init: [0; RV_INIT_BYTES as usize],
        };
        self.next_cmd_id += 1;
        self.trace(|| format!("command {op} for slot {slot} (cutoff {cutoff})"));
        self.grid.write_command(self.command_tail, &cmd);
        self.command_tail = self.command_tail.wrapping_add(1);
        self.grid.publish_command_tail(self.command_tail);
        if op == RV_OP_CREATE || op == RV_OP_RESTART {
            self.slots[slot as usize].phase = Phase::Starting;
        }
        Ok(())
    }

    /// Sends a call to `slot` if it takes messages and its inbox has room.
    fn call(&mut self, slot: u32) {
        self.send_call(slot, None);
    }

    /// Sends a call to `slot` that its actor forwards to `to` (kernel to kernel), which answers the host.
    fn forward(&mut self, slot: u32, to: u32) {
        self.send_call(slot, Some(to));
    }

    /// Sends a call to `slot` (the built-in `test`: op 1 echoes it; op 4 forwards its rest to another slot,
    /// which echoes that), if `slot` takes messages and its inbox has room.
    fn send_call(&mut self, slot: u32, forwarded_to: Option<u32>) {
        let s = &self.slots[slot as usize];
        if matches!(s.phase, Phase::Ending | Phase::Ended)
            || ring::distance(self.grid.inbox_head(slot), s.tail) >= self.grid.config().inbox_capacity
        {
            return;
        }
        let correlation = self.calls.len() as u64 + 1;
        let mut payload = [0u8; RV_PAYLOAD_BYTES as usize];
        let echo = |p: &mut [u8]| {
            p[..4].copy_from_slice(&TEST_ECHO.to_le_bytes());
            p[8..16].copy_from_slice(&correlation.to_le_bytes());
        };
        let len = match forwarded_to {
            None => {
                echo(&mut payload);
                16
            }
            Some(to) => {
                payload[..4].copy_from_slice(&TEST_FORWARD.to_le_bytes());
                payload[4..8].copy_from_slice(&to.to_le_bytes());
                echo(&mut payload[8..]);
                24
            }
        };
        let env = RawEnvelope {
            kind: RV_KIND_USER as u8,
            flags: 0,
            payload_len: len,
            source: RV_HOST_ENDPOINT,
            destination: slot,
            generation: 0,
            correlation,
            hlc: 0,
            payload,
        };
        let call = Call {
            slot,
            index: s.tail,
            forwarded_to,
            fate: Fate::Pending,
            after_crash_of: s.crash,
            after_corrupt_of: s.corrupt.map(|(_, seq)| seq),
            during_stall: s.stall,
            during_device_stall: self.device_stall,
        };
        self.trace(|| format!("call {correlation} to slot {slot} at {} (forwarded to {forwarded_to:?})", call.index));
        self.grid.write_inbox(slot, call.index, &env);
        let s = &mut self.slots[slot as usize];
        s.tail = s.tail.wrapping_add(1);
        self.grid.publish_inbox_tail(slot, s.tail);
        self.calls.push(call);
        self.report.calls += 1;
    }

    fn write_faults(&self, slot: u32) {
        let s = &self.slots[slot as usize];
        self.trace(|| format!("faults of slot {slot}: bits {:#x}, seq {}", s.fault_flags, s.fault_seq));
        self.grid.write_faults(slot, s.fault_flags, s.fault_seq);
    }

    /// Arms a one-shot fault (`CrashNextMessage` or `CorruptNextMessage`, as `Device::inject` writes it) for
    /// `slot`'s running incarnation, one at a time; a crash with a restart grant if `grant`.
    fn arm(&mut self, slot: u32, fault: u32, grant: bool) {
        let s = &mut self.slots[slot as usize];
        if s.phase != Phase::Active || s.crash.is_some() || s.corrupt.is_some() {
            return;
        }
        if grant && !s.granted {
            s.granted = true;
            let generation = s.generation;
            self.grid.write_restart_grant(slot, generation);
        }
        let s = &mut self.slots[slot as usize];
        s.fault_seq += 1;
        s.fault_flags = (s.fault_flags & !(RV_FAULT_CRASH_NEXT | RV_FAULT_CORRUPT_NEXT)) | fault;
        if fault == RV_FAULT_CRASH_NEXT {
            s.crash = Some(s.generation);
        } else {
            s.corrupt = Some((s.generation, s.fault_seq));
        }
        self.write_faults(slot);
    }

    /// Stalls `slot` (as `SlotFault::Stall` does): what is sent from now on waits for the stall's end.
    fn stall(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.stalls += 1;
        s.stall = Some(s.stalls);
        s.fault_flags |= RV_FAULT_STALL;
        self.write_faults(slot);
    }

    /// Ends `slot`'s stall, if one is in force.
    fn end_stall(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.stall.take().is_none() {
            return;
        }
        s.fault_flags &= !RV_FAULT_STALL;
        self.write_faults(slot);
    }

    /// Ends the device's stall, if one is in force: block 0 beats again from now on.
    fn end_device_stall(&mut self) {
        if self.device_stall.take().is_some() {
            self.grid.write_device_faults(0);
            self.heartbeat_since_ns = self.sched.now_ns(self.me);
        }
    }

    /// Reads what the device published: events, replies (of the blocks whose doorbell rang), the heartbeat;
    /// submits the restarts and creates that events call for. Returns whether anything was read.
    fn poll(&mut self) -> Result<bool, Violation> {
        let mut read = false;
        let tail = self.grid.event_tail();
        let mut evented = Vec::new();
        while self.event_head != tail {
            let event = self.grid.read_event(self.event_head);
            self.trace(|| format!("event {event:?}"));
            self.event_head = self.event_head.wrapping_add(1);
            self.grid.release_events(self.event_head);
            self.on_event(&event)?;
            evented.push(event.slot);
            read = true;
        }
        // as the poller does: the outbox of each slot an event was about (block 0 may have answered queued
        // kernel-to-kernel messages there, and it rings no block's doorbell)
        for slot in evented {
            self.read_outbox(slot)?;
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
            let s = &self.slots[slot as usize];
            let op = match s.phase {
                Phase::Failed => RV_OP_RESTART,
                Phase::Ended => RV_OP_CREATE,
                _ => continue,
            };
            self.submit(op, slot, s.tail)?;
            read = true;
        }
        self.watch_heartbeat()?;
        Ok(read)
    }

    fn read_outbox(&mut self, slot: u32) -> Result<bool, Violation> {
        let tail = self.grid.outbox_tail(slot);
        let mut read = false;
        while self.slots[slot as usize].outbox_head != tail {
            let head = self.slots[slot as usize].outbox_head;
            let reply = self.grid.read_outbox(slot, head);
            self.trace(|| format!("slot {slot}'s outbox: kind {} for call {}", reply.kind, reply.correlation));
            self.slots[slot as usize].outbox_head = head.wrapping_add(1);
            self.grid.release_outbox(slot, head.wrapping_add(1));
            self.on_reply(slot, &reply)?;
            read = true;
        }
        Ok(read)
    }
}
