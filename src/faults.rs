//! Fault injection for tests of your own trees: aim a fault at a child by registry name or pattern, or let a
//! seeded [`ChaosSchedule`] pick faults and targets (the same seed replays the same choices).
//!
//! Device-side faults are carried out by the device code (through the control block's fault bits, or a
//! command to block 0); host-side faults kill the ractor actors that mirror GPU actors or supervise them.
//!
//! ```no_run
//! # use ringvisor::prelude::*;
//! # use ringvisor::faults::InjectedFault;
//! # async fn t(rt: &Runtime) -> Result<(), Box<dyn std::error::Error>> {
//! rt.faults().inject("fleet/sensors/*", InjectedFault::CrashNextMessage)?; // every sensor
//! # Ok(()) }
//! ```

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use ringvisor_device::{Device, DeviceError, DeviceFault, SlotFault};
use ringvisor_supervisor::{ChildRef, ChildStatus, EventFault, ExitReason, RegistryError, Services};

/// A fault aimed at supervised children by registry name or pattern, through
/// [`Runtime::faults`](crate::Runtime::faults). (To aim one at a slot number through the device API, use
/// [`SlotFault`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedFault {
    /// Device: the actor fails on the next message it processes (that message becomes a poison letter).
    CrashNextMessage,
    /// Device: the next host message is handled as a corrupt envelope: answered with a `BadEnvelope` error,
    /// counted, and the actor keeps running (nothing to supervise; nothing lost).
    CorruptNextEnvelope,
    /// Device: block 0 kills the actor (its queued messages are handed back); the child exits `killed`.
    KillDeviceActor,
    /// Host: a worker is killed from the host (a host actor child with ractor's kill; a GPU child exits
    /// `killed` through [`ringvisor_supervisor::GpuActorRef::exit`]); its supervisor sees `killed` (and kills
    /// a GPU child's device actor).
    KillActor,
    /// Host: a supervisor child is killed (its children die with it, without cleanup); its parent acts.
    KillSupervisor,
    /// Device: the actor stops making progress and its heartbeat stops (the stall bit of its control
    /// block), for the given time or, with `None`, until the watchdog fails it (or it is killed).
    Hang(Option<Duration>),
    /// Host: the slot's device events do not reach its child's supervisor for this long (the watchdog notices an
    /// actor that failed or ended unheard).
    DropEvents(Duration),
    /// Host: the slot's device events reach its child's supervisor this much later, for the next second.
    DelayEvents(Duration),
    /// Device: the actor gets stuck inside its behaviour for good (the wedge bit): no progress, no heartbeat,
    /// and it never acknowledges a kill. The watchdog fails the child, its restart is not acknowledged,
    /// the slot is quarantined and the child moves to another slot.
    Wedge,
    /// Device, whole executor: no block makes progress (block 0 included) for the given time. Shorter than
    /// [`ringvisor_device::DeviceConfig::lost_after`] it is ridden out; longer, the device is lost.
    StallDevice(Duration),
    /// Device, whole executor: the persistent kernel stops for good. The runtime declares the device lost
    /// and restarts it (one_for_all at the device level: tree stopped, new kernel, tree started again).
    LoseDevice,
}

impl InjectedFault {
    /// Every kind, for schedules and summaries.
    pub const ALL: [InjectedFault; 11] = [
        Self::CrashNextMessage,
        Self::CorruptNextEnvelope,
        Self::KillDeviceActor,
        Self::KillActor,
        Self::KillSupervisor,
        Self::Hang(None),
        Self::DropEvents(Duration::from_millis(300)),
        Self::DelayEvents(Duration::from_millis(20)),
        Self::Wedge,
        Self::StallDevice(Duration::from_millis(50)),
        Self::LoseDevice,
    ];

    /// Short label.
    pub fn label(self) -> &'static str {
        match self {
            Self::CrashNextMessage => "crash_next_message",
            Self::CorruptNextEnvelope => "corrupt_next_envelope",
            Self::KillDeviceActor => "kill_device_actor",
            Self::KillActor => "kill_actor",
            Self::KillSupervisor => "kill_supervisor",
            Self::Hang(_) => "hang",
            Self::DropEvents(_) => "drop_events",
            Self::DelayEvents(_) => "delay_events",
            Self::Wedge => "wedge",
            Self::StallDevice(_) => "stall_device",
            Self::LoseDevice => "lose_device",
        }
    }

    /// A fault of the whole device (the target only picks the device).
    pub fn is_device_wide(self) -> bool {
        matches!(self, Self::StallDevice(_) | Self::LoseDevice)
    }
}

/// Why a fault could not be injected.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The name or pattern is invalid.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// No registered child matches.
    #[error("no registered actor matches `{0}`")]
    NoTarget(String),
    /// The device refused.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Injects faults into the children of one runtime (see [`crate::Runtime::faults`]).
pub struct FaultInjector<'a> {
    services: &'a Services,
}

impl<'a> FaultInjector<'a> {
    pub(crate) fn new(services: &'a Services) -> Self {
        Self { services }
    }

    /// Injects `fault` into every running child whose name matches `target` (an exact name or a pattern);
    /// returns how many were hit. Children that are not running, or of the wrong kind for the fault (a
    /// device fault on a host actor, `KillSupervisor` on a worker), are skipped. A device-wide fault hits
    /// each device that runs a matched GPU child once (the first device if none does), and returns how many
    /// devices it hit.
    pub fn inject(&self, target: &str, fault: InjectedFault) -> Result<usize, FaultError> {
        let found = self.services.registry().find(target)?;
        if found.is_empty() {
            return Err(FaultError::NoTarget(target.to_string()));
        }
        if fault.is_device_wide() {
            let mut devices: Vec<Device> = Vec::new();
            for gpu in found.iter().filter_map(|(_, child)| child.gpu()) {
                let device = gpu.device();
                if !devices.iter().any(|d| d.same_device(&device)) {
                    devices.push(device);
                }
            }
            if devices.is_empty() {
                devices.extend(self.services.device());
            }
            let mut hit = 0;
            for device in devices {
                hit += usize::from(inject_into_device(device, fault)?);
            }
            return Ok(hit);
        }
        let mut hit = 0;
        for (_, child) in &found {
            hit += usize::from(self.inject_one(child, fault)?);
        }
        Ok(hit)
    }

    fn inject_one(&self, child: &ChildRef, fault: InjectedFault) -> Result<bool, FaultError> {
        if child.status() != ChildStatus::Running {
            return Ok(false);
        }
        let is_supervisor = ringvisor_supervisor::SupervisorRef::from_child(child).is_some();
        match fault {
            InjectedFault::CrashNextMessage
            | InjectedFault::CorruptNextEnvelope
            | InjectedFault::KillDeviceActor
            | InjectedFault::Wedge
            | InjectedFault::Hang(_) => {
                let Some(gpu) = child.gpu() else { return Ok(false) };
                let device = gpu.device();
                match fault {
                    InjectedFault::Wedge => device.inject(gpu.slot(), SlotFault::Wedge)?,
                    InjectedFault::CrashNextMessage => device.inject(gpu.slot(), SlotFault::CrashNextMessage)?,
                    InjectedFault::CorruptNextEnvelope => device.inject(gpu.slot(), SlotFault::CorruptNextEnvelope)?,
                    InjectedFault::Hang(duration) => {
                        device.inject(gpu.slot(), SlotFault::Stall)?;
                        if let Some(d) = duration {
                            let (device, slot) = (device.clone(), gpu.slot());
                            std::thread::spawn(move || {
                                std::thread::sleep(d);
                                let _ = device.inject(slot, SlotFault::ClearStall);
                            });
                        }
                    }
                    _ => match device.kill(gpu.slot()) {
                        Ok(_) => {}
                        // Already being stopped or restarted: nothing to kill right now.
                        Err(DeviceError::CommandInFlight { .. }) => return Ok(false),
                        Err(e) => return Err(e.into()),
                    },
                }
                tracing::info!(child = child.id(), fault = fault.label(), "fault injected");
                Ok(true)
            }
            InjectedFault::DropEvents(d) | InjectedFault::DelayEvents(d) => {
                let (fault, duration) = match fault {
                    InjectedFault::DropEvents(_) => (EventFault::Drop, d),
                    _ => (EventFault::Delay(d), Duration::from_secs(1)),
                };
                let Some(name) = child.name() else { return Ok(false) };
                Ok(self.services.inject_event_fault(name, fault, duration))
            }
            // A GPU child exits `killed` through its handle, as a killed host actor does (its device actor is
            // killed by its supervisor, its mirror, if it has one, fails with it); its mirror is not asked for.
            InjectedFault::KillActor if !is_supervisor => match child.gpu() {
                Some(gpu) => Ok(gpu.exit(ExitReason::Killed)),
                None => match child.actor() {
                    Some(actor) => {
                        actor.kill();
                        Ok(true)
                    }
                    None => Ok(false),
                },
            },
            InjectedFault::KillSupervisor if is_supervisor => match child.actor() {
                Some(actor) => {
                    actor.kill();
                    Ok(true)
                }
                None => Ok(false),
            },
            _ => Ok(false),
        }
    }

    /// Injects a device-wide fault (`StallDevice`, `LoseDevice`) into the tree's first device as it is now.
    /// Returns false for other faults, or if the device is already lost.
    pub fn inject_device(&self, fault: InjectedFault) -> Result<bool, FaultError> {
        self.inject_device_at(0, fault)
    }

    /// [`FaultInjector::inject_device`] into device `index` of the runtime's devices (false if there is none).
    pub fn inject_device_at(&self, index: usize, fault: InjectedFault) -> Result<bool, FaultError> {
        match self.services.device_at(index) {
            Some(device) => inject_into_device(device, fault),
            None => Ok(false),
        }
    }
}

/// Injects a device-wide fault into `device`; false for other faults, or if the device is already lost.
fn inject_into_device(device: Device, fault: InjectedFault) -> Result<bool, FaultError> {
    let result = match fault {
        InjectedFault::StallDevice(d) => device.inject_device(DeviceFault::Stall).map(|()| {
            std::thread::spawn(move || {
                std::thread::sleep(d);
                let _ = device.inject_device(DeviceFault::Resume);
            });
        }),
        InjectedFault::LoseDevice => device.inject_device(DeviceFault::Halt),
        _ => return Ok(false),
    };
    match result {
        Ok(()) => {
            tracing::info!(fault = fault.label(), "device fault injected");
            Ok(true)
        }
        Err(DeviceError::DeviceLost | DeviceError::Closed) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A seeded schedule of faults: which fault, aimed at which of the given names.
pub struct ChaosSchedule {
    rng: StdRng,
    kinds: Vec<InjectedFault>,
}

impl ChaosSchedule {
    /// A schedule drawing among `kinds` with seed `seed`.
    pub fn new(seed: u64, kinds: &[InjectedFault]) -> Self {
        Self { rng: StdRng::seed_from_u64(seed), kinds: kinds.to_vec() }
    }

    /// The next fault and the index of its target among `targets` candidates (`None` without candidates).
    pub fn next(&mut self, targets: usize) -> Option<(InjectedFault, usize)> {
        if targets == 0 || self.kinds.is_empty() {
            return None;
        }
        let kind = self.kinds[self.rng.gen_range(0..self.kinds.len())];
        Some((kind, self.rng.gen_range(0..targets)))
    }

    /// A number in `0..n` from the same stream (for callers' own choices, to stay replayable).
    pub fn pick(&mut self, n: usize) -> usize {
        self.rng.gen_range(0..n.max(1))
    }
}
