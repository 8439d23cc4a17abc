//! GPU children, from the supervision side. A GPU child is not a ractor actor: its supervisor drives its
//! device slot directly (starts it, drains or kills it) and hears about its end through *notices* routed
//! from the device's event path and the watchdog, so a child costs a slot binding, not a task and a mailbox.
//!
//! This module is the one door to a GPU child's lifecycle: the supervisor calls only the functions below
//! (claim a slot, prepare and start an incarnation, stop it, orphan, retire or abandon its slot, read what its
//! end means), so its own code reads as OTP's decisions. Behind the door:
//! - `incarnation.rs`: one incarnation of a GPU child (bring-up, drain or kill on stop, what its end means);
//! - `claim.rs`: a child's hold on its slot (take, start an incarnation, clean up, give back);
//! - `quarantine.rs`: a wedged actor, from stuck to moved (the whole sequence in its module doc).
//!
//! The devices' slots, the notices and the watchdog are one layer down, in `crate::slots`.

mod claim;
mod incarnation;
mod quarantine;

use std::time::Instant;

use crate::handle::GpuActorShared;
use crate::policy::Shutdown;
use crate::reason::ExitReason;

pub(crate) use claim::{
    abandon_slot as abandon, cancel_prepared, prepare_incarnation as prepare, release_slot, retire_slot as retire,
    start_incarnation as start, stop_orphaned_slot as orphan, take_slot as claim_slot, PreparedStart,
};
pub(crate) use incarnation::{exit_reason, forget, Stopping};

/// Asks incarnation `generation` of `gpu`'s slot to stop by `shutdown`: a drain (it finishes the messages it
/// has), or for a brutal kill a device kill at once (the slot is not drained).
pub(crate) fn begin_stop(gpu: &GpuActorShared, generation: u32, shutdown: Shutdown) -> Stopping {
    let kill = shutdown == Shutdown::BrutalKill;
    if kill {
        orphan(gpu);
    }
    incarnation::begin_stop(gpu, generation, kill)
}

/// Waits for the stop [`begin_stop`] asked for at `issued`, within `shutdown`'s limit: `Shutdown` once the
/// drain has ended, `Killed` for a kill or past the limit (the caller then orphans the slot: the device actor
/// is killed).
pub(crate) async fn finish_stop(
    gpu: &GpuActorShared,
    stopping: Stopping,
    shutdown: Shutdown,
    issued: Instant,
) -> ExitReason {
    let deadline = match shutdown {
        Shutdown::Timeout(limit) => Some(issued + limit),
        Shutdown::BrutalKill => Some(issued),
        Shutdown::Infinity => None,
    };
    incarnation::finish_stop(gpu, stopping, deadline).await
}

/// After an incarnation ended on its own: its slot is orphaned ([`orphan`]) unless block 0 already restarts it
/// under a grant, which is left for the next incarnation to take (or, if the child is not restarted, killed
/// when its slot is retired).
pub(crate) fn orphan_unless_granted(gpu: &GpuActorShared) {
    if !gpu.device().has_granted_restart(gpu.slot()) {
        orphan(gpu);
    }
}
