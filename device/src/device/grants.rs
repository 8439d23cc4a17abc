//! Restart grants: the host's standing permission for block 0 to restart a failed actor in place at once,
//! without a round trip. The host stays the decider: it gives a grant only while a restart would be allowed
//! and withdraws it when that changes; the device uses a grant at most once (it names the incarnation's
//! generation), says in the Failed event whether it did, and carries the restart out as if the host had sent
//! the Restart that started the incarnation again (same behaviour and init, new generation; the messages
//! queued at that moment handed back, those sent later kept for the new incarnation).

use std::sync::Arc;

use super::accounting::SlotHost;
use super::commands::PendingCommand;
use super::Device;
use crate::codes::SlotState;
use crate::error::DeviceError;
use crate::ring;

impl Device {
    /// Grants block 0 a restart in place of `slot`'s current incarnation if it fails (`granted`), or
    /// withdraws the grant. A grant applies to the incarnation the host last saw start and only while it is
    /// Active; it is used at most once. A withdrawal the device has not seen before the failure does not undo
    /// the restart: the Failed event says whether one follows (see [`Device::take_granted_restart`]).
    pub fn set_restart_grant(&self, slot: u32, granted: bool) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let host = self.inner.slots[slot as usize].lock();
        let generation = if granted && host.state == SlotState::Active { host.generation } else { 0 };
        self.inner.grid.write_restart_grant(slot, generation);
        Ok(())
    }

    /// Grants block 0 a restart in place of incarnation `generation` of `slot` if it fails, and only of that
    /// one: when the host's view of the slot has moved past it (a restart block 0 already carried out that
    /// the caller has not taken over yet) or it is not Active, any grant is withdrawn instead. A supervisor
    /// grants the incarnation it knows it runs, so that block 0 never restarts one it has not heard of: each
    /// restart by grant then follows a failure the supervisor counts (OTP's intensity sees every crash).
    pub fn set_restart_grant_for(&self, slot: u32, generation: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let host = self.inner.slots[slot as usize].lock();
        let known = host.state == SlotState::Active && host.generation == generation;
        self.inner.grid.write_restart_grant(slot, if known { generation } else { 0 });
        Ok(())
    }

    /// The restart block 0 carries out in `slot` under a grant, announced by the last Failed event the host
    /// read, as a command to wait for (its outcome: `Restarted`, or `CreateFailed` if the init failed).
    /// `None` if the last failure was not followed by one, or it was taken already, or it no longer concerns the
    /// slot's current incarnation (the slot has moved past it, or the incarnation it started was killed since):
    /// a new child given the slot never takes over an old child's restart.
    pub fn take_granted_restart(&self, slot: u32) -> Option<PendingCommand> {
        if slot >= self.slot_count() {
            return None;
        }
        let mut host = self.inner.slots[slot as usize].lock();
        self.drop_stale_grant(&mut host);
        let (cmd_id, completion) = host.granted.take()?;
        Some(PendingCommand::new(cmd_id, slot, completion, Arc::downgrade(&self.inner)))
    }

    /// Whether a restart under a grant was announced in `slot`, not yet taken, and about its current incarnation.
    pub fn has_granted_restart(&self, slot: u32) -> bool {
        if slot >= self.slot_count() {
            return false;
        }
        let mut host = self.inner.slots[slot as usize].lock();
        self.drop_stale_grant(&mut host);
        host.granted.is_some()
    }

    /// Drops an announced restart by grant that no longer concerns the slot's current incarnation.
    fn drop_stale_grant(&self, host: &mut SlotHost) {
        let Some((cmd_id, _)) = &host.granted else { return };
        let restarted = *cmd_id as u32; // the generation the restart creates (see `granted_cmd_id`)
        let current = host.generation == ring::back(restarted, 1)
            || (host.generation == restarted && !matches!(host.state, SlotState::Terminated | SlotState::Dormant));
        if !current {
            self.inner.forget_granted_restart(host);
        }
    }
}
