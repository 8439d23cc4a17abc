//! Commands to block 0 (create, restart, kill, drain, resume): submitted into the command ring, answered by
//! the event block 0 publishes when it has carried one out.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::accounting::PendingOp;
use super::{CommandWaiter, Device, DeviceInner};
use crate::behaviour::{AsBehaviour, BehaviourId};
use crate::clock::deadline_after;
use crate::codes::{CommandOp, EventKind, SlotState};
use crate::error::DeviceError;
use crate::event::SlotEvent;
use crate::layout::*;
use crate::ring;
use crate::sync::{lock, Completion};
use crate::wait::Retry;

/// A command submitted to block 0; resolves when the device reports its outcome.
pub struct PendingCommand {
    cmd_id: u64,
    slot: u32,
    completion: Arc<Completion<Result<SlotEvent, DeviceError>>>,
    device: Weak<DeviceInner>,
}

impl std::fmt::Debug for PendingCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCommand").field("cmd_id", &self.cmd_id).field("slot", &self.slot).finish()
    }
}

impl PendingCommand {
    pub(super) fn new(cmd_id: u64, slot: u32, completion: CommandWaiter, device: Weak<DeviceInner>) -> Self {
        Self { cmd_id, slot, completion, device }
    }

    /// The command's id (also in the resulting event).
    pub fn id(&self) -> u64 {
        self.cmd_id
    }

    /// Polls the device in the poller's place for a short while (see `DeviceInner::assist`).
    pub(super) fn assisted(&self, deadline: Instant) -> Option<Result<SlotEvent, DeviceError>> {
        self.device.upgrade().and_then(|d| d.assist(&self.completion, deadline))
    }

    /// Waits for the outcome from sync code, up to `timeout` in all.
    pub fn wait_blocking(self, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        let deadline = deadline_after(timeout);
        if let Some(out) = self.assisted(deadline) {
            return out;
        }
        // what is left of the timeout after the assist (the whole of it again made a wait last up to the assist's
        // 50 µs longer than asked)
        match self.completion.wait_blocking(deadline.saturating_duration_since(Instant::now())) {
            Some(r) => r,
            None => Err(self.timed_out()),
        }
    }

    /// Waits for the outcome from async code, up to `timeout` in all.
    pub async fn wait(self, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        let deadline = deadline_after(timeout);
        if let Some(out) = self.assisted(deadline) {
            return out;
        }
        match self.completion.wait(deadline.saturating_duration_since(Instant::now())).await {
            Some(r) => r,
            None => Err(self.timed_out()),
        }
    }

    pub(super) fn timed_out(&self) -> DeviceError {
        match self.device.upgrade() {
            Some(d) if !d.closed.load(Ordering::Acquire) => {
                tracing::warn!(slot = self.slot, cmd_id = self.cmd_id, "command outcome not seen before deadline");
                DeviceError::Timeout
            }
            _ => DeviceError::Closed,
        }
    }
}

/// A command as submitted, with every field explicit (see [`Device::submit`]).
#[derive(Clone, Debug)]
pub struct CommandRequest {
    /// What to do.
    pub op: CommandOp,
    /// The slot.
    pub slot: u32,
    /// The generation the command applies to; `None`: the host's latest knowledge.
    pub expected_generation: Option<u32>,
    /// Behaviour (Create / Restart).
    pub behaviour: Option<BehaviourId>,
    /// Init bytes (Create / Restart), at most 96.
    pub init: Vec<u8>,
}

impl Device {
    /// Creates an actor with `behaviour` in a Dormant or Terminated slot.
    pub fn create(&self, slot: u32, behaviour: impl AsBehaviour, init: &[u8]) -> Result<PendingCommand, DeviceError> {
        let behaviour = behaviour.resolve(&self.inner.behaviours)?;
        self.submit(CommandRequest {
            op: CommandOp::Create,
            slot,
            expected_generation: None,
            behaviour: Some(behaviour),
            init: init.to_vec(),
        })
    }

    /// Kills (if running) and re-creates the actor in `slot` with a new generation. Messages it had not
    /// consumed are handed back in the outcome; messages sent after this call wait for the new incarnation.
    /// For a Failed slot, the messages sent after the host learned of the failure wait too (they were sent
    /// to an actor about to be restarted); those queued before it are handed back.
    pub fn restart(&self, slot: u32, behaviour: impl AsBehaviour, init: &[u8]) -> Result<PendingCommand, DeviceError> {
        let behaviour = behaviour.resolve(&self.inner.behaviours)?;
        self.submit(CommandRequest {
            op: CommandOp::Restart,
            slot,
            expected_generation: None,
            behaviour: Some(behaviour),
            init: init.to_vec(),
        })
    }

    /// Terminates the actor in `slot` at its next message boundary; unconsumed messages are handed back.
    pub fn kill(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Kill,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Stops accepting messages for `slot`; the actor finishes what it has, then terminates. The command
    /// resolves when draining starts; see [`Device::drain_and_wait`] to wait for the end.
    pub fn drain(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Drain,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Drains `slot` and waits until it has terminated (or failed, or was killed).
    pub fn drain_and_wait(&self, slot: u32, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        let events = self.subscribe_slot(slot)?;
        let deadline = deadline_after(timeout);
        self.drain(slot)?.wait_blocking(timeout)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Some(e) if matches!(e.event.kind, EventKind::Drained | EventKind::Failed | EventKind::Killed) => {
                    return Ok(e)
                }
                Some(_) => continue,
                None => return Err(DeviceError::Timeout),
            }
        }
    }

    /// Cancels a drain: the actor accepts messages again.
    pub fn resume(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Resume,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Submits a command with every field explicit. Checks what the host can check (slot range, behaviour,
    /// init length, one command in flight per slot) and returns an error before anything is written; the
    /// device checks the rest (legal transition, generation) and its rejection resolves the command with
    /// [`DeviceError::Rejected`].
    pub fn submit(&self, req: CommandRequest) -> Result<PendingCommand, DeviceError> {
        self.check_open()?;
        self.check_slot(req.slot)?;
        if req.init.len() > RV_INIT_BYTES as usize {
            return Err(DeviceError::PayloadTooLarge { len: req.init.len(), max: RV_INIT_BYTES as usize });
        }
        if let Some(b) = req.behaviour {
            let id = b.resolve(&self.inner.behaviours)?;
            let (needs, has) = (self.inner.behaviours.state_bytes(id), self.inner.grid.config().state_bytes);
            if needs > has {
                let behaviour = self.inner.behaviours.name(id).unwrap_or_default().to_string();
                return Err(DeviceError::StateTooSmall { behaviour, needs, has });
            }
        }
        let inner = &self.inner;
        let cmd_id = inner.next_cmd_id.fetch_add(1, Ordering::Relaxed);
        // Room in the command ring first, the slot's lock after: no slot is locked while block 0 is waited for
        // (the thread that reads the device's events takes slots' locks, and may be the executor's own).
        let mut tail = self.command_room()?;
        let mut host = inner.slots[req.slot as usize].lock();
        if host.quarantined {
            return Err(DeviceError::Quarantined { slot: req.slot });
        }
        if host.pending.is_some() {
            return Err(DeviceError::CommandInFlight { slot: req.slot });
        }
        // First inbox index of a new incarnation (Create/Restart); messages before it are handed back.
        let cutoff = match (req.op, host.failed_tail) {
            (CommandOp::Restart, Some(failed_tail)) if host.state == SlotState::Failed => failed_tail,
            _ => host.tail,
        };
        let mut raw = RawCommand {
            op: req.op.raw(),
            slot: req.slot,
            expected_generation: req.expected_generation.unwrap_or(host.generation),
            behaviour: req.behaviour.map(|b| b.0).unwrap_or(0),
            cmd_id,
            inbox_index: cutoff,
            init_len: req.init.len() as u32,
            init: [0; RV_INIT_BYTES as usize],
        };
        raw.init[..req.init.len()].copy_from_slice(&req.init);
        // An injected wedge strikes the incarnation it finds running. A new incarnation of a slot where none runs
        // (a create, or the restart of a failed slot) starts clear of one left there: its init would otherwise
        // never run. A wedged running actor keeps it (its restart must find it wedged), and a quarantined slot
        // takes no command. Written before the command, so the actor that runs the init sees it cleared.
        let stopped = !matches!(host.state, SlotState::Active | SlotState::Draining | SlotState::Initializing);
        let recreate = matches!(req.op, CommandOp::Create | CommandOp::Restart);
        if recreate && stopped && host.fault_flags & RV_FAULT_WEDGE != 0 {
            host.fault_flags &= !RV_FAULT_WEDGE;
            inner.grid.write_faults(req.slot, host.fault_flags, host.fault_seq);
        }
        let floor = (req.op == CommandOp::Restart).then(|| inner.grid.inbox_head(req.slot));
        let completion = Arc::new(Completion::new());
        lock(&inner.commands).insert(cmd_id, completion.clone());
        self.write_command(&mut tail, &raw);
        host.pending = Some(PendingOp {
            cmd_id,
            cutoff,
            recreate: matches!(req.op, CommandOp::Create | CommandOp::Restart),
            floor,
            accepting_before: host.accepting,
        });
        host.accepting = match req.op {
            CommandOp::Create | CommandOp::Restart => true,
            CommandOp::Kill | CommandOp::Drain => false,
            CommandOp::Resume => host.accepting,
        };
        inner.grid.write_pending_op(req.slot, raw.op);
        drop(host);
        drop(tail);
        inner.executor.wake();
        tracing::debug!(slot = req.slot, cmd_id, op = ?req.op, "command submitted");
        Ok(PendingCommand { cmd_id, slot: req.slot, completion, device: Arc::downgrade(inner) })
    }

    /// Writes a command record exactly as given, bypassing every host-side check and bookkeeping. For tests
    /// that prove the device validates what it reads; the outcome arrives through [`Device::subscribe`].
    #[doc(hidden)]
    pub fn submit_raw_command(&self, raw: RawCommand) -> Result<(), DeviceError> {
        self.check_open()?;
        self.push_command(&raw)
    }

    /// Writes `raw` into the command ring once it has room (see [`Device::command_room`]) and wakes the device.
    pub(super) fn push_command(&self, raw: &RawCommand) -> Result<(), DeviceError> {
        let mut tail = self.command_room()?;
        self.write_command(&mut tail, raw);
        drop(tail);
        self.inner.executor.wake();
        Ok(())
    }

    /// The command ring's tail, locked, once the ring has room for a command: waits for block 0 to consume one
    /// (up to the device's command timeout, then `CommandRingFull`). Commands are written in the order their
    /// writers got here.
    fn command_room(&self) -> Result<std::sync::MutexGuard<'_, u32>, DeviceError> {
        let inner = &self.inner;
        let deadline = deadline_after(inner.command_timeout);
        let tail = lock(&inner.command_tail);
        let capacity = inner.grid.config().command_capacity;
        let mut retry = Retry::new(Duration::from_micros(50));
        while ring::distance(inner.grid.command_head(), *tail) >= capacity {
            inner.executor.wake();
            if !retry.again(deadline) {
                return Err(DeviceError::CommandRingFull);
            }
        }
        Ok(tail)
    }

    /// Writes `raw` at the command ring's `tail` (room was made for it) and publishes it.
    fn write_command(&self, tail: &mut u32, raw: &RawCommand) {
        let grid = &self.inner.grid;
        grid.write_command(*tail, raw);
        *tail = tail.wrapping_add(1);
        grid.publish_command_tail(*tail);
    }
}
