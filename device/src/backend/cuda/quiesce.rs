//! Pausing every persistent kernel of a GPU around the driver calls that wait for them.
//!
//! Why: the CUDA driver serialises some calls behind every kernel of the context. `cuModuleLoadDataEx` and
//! `cuModuleUnload`, `cuMemFree`/`cuMemFreeHost` and, by the CUDA programming guide's rules of implicit
//! synchronisation, a device or page-locked host allocation and a memset wait for the kernels already running
//! (seen on an H200: the second `Device::open` of a process blocked in `cuModuleLoadDataEx` behind the first
//! device's persistent kernel, forever). A persistent kernel never ends by itself, so every such call is made
//! while the GPU's persistent kernels are *paused*: each is asked to leave its loop (the header's `terminate`
//! word set to "pause"), its launcher thread sees the kernel end and parks, the calls run, and each launcher
//! relaunches its kernel over the same memory. The protocol keeps all of its state in memory between steps
//! (the event-driven mode relaunches the same way every few thousand iterations), so a pause loses nothing:
//! messages wait in their rings, heartbeats stand still (the loss detector knows: [`Control::paused`]).
//!
//! A kernel that does not pause within [`PAUSE_WAIT`] (a block stuck in a behaviour that never returns) makes
//! the quiesce fail with a clear error; the kernels that did pause are relaunched.

use crate::shared::SharedGrid;
use crate::sync::lock;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a quiesce waits for each running kernel to leave its loop.
pub(crate) const PAUSE_WAIT: Duration = Duration::from_secs(5);

/// Where a persistent kernel's launcher stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The kernel runs (or is being launched).
    Running,
    /// A pause was asked for; the kernel has not left yet.
    Pausing,
    /// The kernel left for a pause; the launcher waits to relaunch it.
    Parked,
    /// The launcher is done: the kernel left for good, or failed.
    Ended,
}

/// One persistent kernel's pause and resume, shared by its launcher thread and the quiesce.
pub(crate) struct Control {
    grid: Arc<SharedGrid>,
    phase: Mutex<Phase>,
    changed: Condvar,
}

impl Control {
    pub(crate) fn new(grid: Arc<SharedGrid>) -> Arc<Self> {
        Arc::new(Self { grid, phase: Mutex::new(Phase::Running), changed: Condvar::new() })
    }

    /// True while the kernel is asked to pause or is parked: its heartbeat stands still on purpose.
    pub(crate) fn paused(&self) -> bool {
        matches!(*lock(&self.phase), Phase::Pausing | Phase::Parked)
    }

    /// The launcher, after its kernel ended: true if it ended for a pause; the launcher then waits here until
    /// the quiesce resumes it (true: relaunch) or the device is shut down meanwhile (false).
    pub(crate) fn park_if_paused(&self) -> bool {
        let mut phase = lock(&self.phase);
        if *phase != Phase::Pausing || self.grid.terminate_requested() {
            return false;
        }
        *phase = Phase::Parked;
        self.changed.notify_all();
        while *phase == Phase::Parked && !self.grid.terminate_requested() {
            phase = self.changed.wait_timeout(phase, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        }
        *phase == Phase::Running && !self.grid.terminate_requested()
    }

    /// The launcher is done with the kernel (it left for good or failed).
    pub(crate) fn ended(&self) {
        *lock(&self.phase) = Phase::Ended;
        self.changed.notify_all();
    }

    /// Wakes a parked launcher so it sees a terminate (shutdown).
    pub(crate) fn wake(&self) {
        self.changed.notify_all();
    }

    /// Asks the kernel to pause and waits until its launcher parked it (true) or it ended (true: nothing to
    /// wait for); false if it is still running after `limit`.
    fn pause(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut phase = lock(&self.phase);
        if *phase == Phase::Ended {
            return true;
        }
        // Asked to leave for good already: nothing to pause, but wait until it has left like a pause would.
        if self.grid.request_pause() {
            *phase = Phase::Pausing;
        }
        while matches!(*phase, Phase::Pausing | Phase::Running) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            phase = self
                .changed
                .wait_timeout(phase, left.min(Duration::from_millis(10)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Relaunches a parked kernel, or withdraws a pause the kernel has not acted on yet.
    fn resume(&self) {
        let mut phase = lock(&self.phase);
        if matches!(*phase, Phase::Parked | Phase::Pausing) {
            if self.grid.clear_pause() {
                *phase = Phase::Running;
            }
            self.changed.notify_all();
        }
    }
}

/// The persistent kernels of one GPU, and the lock that makes quiesces take turns.
#[derive(Default)]
pub(crate) struct Kernels {
    running: Mutex<Vec<Weak<Control>>>,
    turn: Mutex<()>,
}

impl Kernels {
    /// A persistent kernel was launched.
    pub(crate) fn add(&self, control: &Arc<Control>) {
        let mut running = lock(&self.running);
        running.retain(|w| w.strong_count() > 0);
        running.push(Arc::downgrade(control));
    }

    /// Runs `f` while every persistent kernel of the GPU is paused, then relaunches them. Fails, running
    /// nothing, if a kernel does not pause within `limit`.
    pub(crate) fn quiesced<T>(&self, limit: Duration, f: impl FnOnce() -> T) -> Result<T, String> {
        let _turn = lock(&self.turn);
        let controls: Vec<Arc<Control>> = lock(&self.running).iter().filter_map(Weak::upgrade).collect();
        let mut paused = Vec::with_capacity(controls.len());
        let mut stuck = false;
        for c in controls {
            let ok = c.pause(limit);
            paused.push(c);
            if !ok {
                stuck = true;
                break;
            }
        }
        let out = if stuck {
            Err(format!(
                "a persistent kernel of this GPU did not pause within {limit:?} (a block stuck in a behaviour that never \
                 returns?): the driver call would wait for it forever"
            ))
        } else {
            Ok(f())
        };
        for c in paused {
            c.resume();
        }
        out
    }
}
