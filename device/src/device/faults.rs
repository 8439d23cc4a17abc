//! Faults injected through the shared region and carried out by the device code: one slot's
//! ([`SlotFault`], through its control block) or the whole device's ([`DeviceFault`], through the grid header).

use std::sync::atomic::Ordering;

use super::Device;
use crate::error::DeviceError;
use crate::layout::*;

/// A fault aimed at a slot number through [`Device::inject`](crate::Device::inject), carried out by the
/// device code through the slot's control block. To aim a fault at a supervised child by its registry name
/// or a pattern, use `ringvisor::faults::InjectedFault` with `Runtime::faults()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotFault {
    /// Fail with `Injected` on the next message.
    CrashNextMessage,
    /// Stop making progress (and stop the heartbeat) until cleared.
    Stall,
    /// Clear a `Stall`.
    ClearStall,
    /// Handle the next host message as a corrupt envelope: it is answered with a `BadEnvelope` error (and
    /// counted in `bad_envelopes`); the actor keeps running.
    CorruptNextEnvelope,
    /// Stuck inside the behaviour for good: no progress, no heartbeat, and requests (kill, restart, drain)
    /// are never acknowledged, as a GPU block spinning in user code. Only [`Device::quarantine`] gets the
    /// host past it.
    Wedge,
}

/// A fault of the whole device, carried out by the device code through the grid header
/// (see [`Device::inject_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFault {
    /// Every block, block 0 included, stops making progress (and block 0's heartbeat stops) until `Resume`.
    Stall,
    /// Ends a `Stall`.
    Resume,
    /// The persistent kernel stops for good (the CUDA kernel leaves): the device will be declared lost.
    Halt,
}

impl Device {
    /// Injects a fault into `slot` through its control block; the device code carries it out.
    pub fn inject(&self, slot: u32, fault: SlotFault) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let mut host = self.inner.slots[slot as usize].lock();
        let before = (host.fault_flags, host.fault_seq);
        match fault {
            SlotFault::CrashNextMessage => {
                host.fault_flags = (host.fault_flags | RV_FAULT_CRASH_NEXT) & !RV_FAULT_CORRUPT_NEXT;
                host.fault_seq = host.fault_seq.wrapping_add(1);
            }
            SlotFault::CorruptNextEnvelope => {
                host.fault_flags = (host.fault_flags | RV_FAULT_CORRUPT_NEXT) & !RV_FAULT_CRASH_NEXT;
                host.fault_seq = host.fault_seq.wrapping_add(1);
            }
            SlotFault::Stall => host.fault_flags |= RV_FAULT_STALL,
            SlotFault::ClearStall => host.fault_flags &= !RV_FAULT_STALL,
            SlotFault::Wedge => host.fault_flags |= RV_FAULT_WEDGE,
        }
        if (host.fault_flags, host.fault_seq) == before {
            // the device has these bits already (a supervisor clears a stall at every start, usually unset)
            return Ok(());
        }
        self.inner.grid.write_faults(slot, host.fault_flags, host.fault_seq);
        drop(host);
        self.inner.executor.mark_work(slot);
        Ok(())
    }

    /// Injects a fault into the whole device through the grid header; the device code carries it out.
    pub fn inject_device(&self, fault: DeviceFault) -> Result<(), DeviceError> {
        self.check_open()?;
        // A halt is for good: a later Resume ends a stall only.
        let bits = match fault {
            DeviceFault::Stall => {
                self.inner.device_faults.fetch_or(RV_DEVICE_STALL, Ordering::AcqRel) | RV_DEVICE_STALL
            }
            DeviceFault::Resume => {
                self.inner.device_faults.fetch_and(!RV_DEVICE_STALL, Ordering::AcqRel) & !RV_DEVICE_STALL
            }
            DeviceFault::Halt => self.inner.device_faults.fetch_or(RV_DEVICE_HALT, Ordering::AcqRel) | RV_DEVICE_HALT,
        };
        tracing::warn!(?fault, "device fault injected");
        self.inner.grid.write_device_faults(bits);
        self.inner.executor.wake();
        Ok(())
    }
}
