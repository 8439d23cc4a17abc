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

    /// The launcher, after its kernel ended for a pause: parks until the quiesce resumes it or withdraws the pause
    /// (true: relaunch) or the device is shut down meanwhile (false). A quiesce that asks for a pause again before
    /// the launcher has woken from the last resume finds it still parked (its kernel is not running): the launcher
    /// stays parked for it instead of taking the new pause for a shutdown (seen as a device lost when two devices
    /// opened and closed at once).
    pub(crate) fn park_if_paused(&self) -> bool {
        let mut phase = lock(&self.phase);
        while *phase == Phase::Pausing && !self.grid.terminate_requested() {
            *phase = Phase::Parked;
            self.changed.notify_all();
            while *phase == Phase::Parked && !self.grid.terminate_requested() {
                phase =
                    self.changed.wait_timeout(phase, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
            }
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
    fn add(&self, control: &Arc<Control>) {
        let mut running = lock(&self.running);
        running.retain(|w| w.strong_count() > 0);
        running.push(Arc::downgrade(control));
    }

    /// Registers a persistent kernel and makes its first launch between quiesces: one under way ends first (its
    /// frees would otherwise wait for the new kernel forever: seen on an H100), and every later one pauses it.
    pub(crate) fn launch_first<T>(&self, control: &Arc<Control>, launch: impl FnOnce() -> T) -> T {
        let _turn = lock(&self.turn);
        self.add(control);
        launch()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::compute_layout;
    use crate::backend::region::HostRegion;
    use crate::layout::{RawGridHeader, RawGridParams};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A grid header in host memory (only its `terminate` word is used here), and the region that holds it.
    fn grid() -> (Arc<SharedGrid>, HostRegion) {
        let params = RawGridParams {
            slot_count: 1,
            inbox_capacity: 4,
            outbox_capacity: 4,
            k2k_capacity: 2,
            command_capacity: 64,
            event_capacity: 64,
            state_bytes: 64,
            bulk_bytes: 0,
        };
        let header = compute_layout(&params).unwrap();
        let region = HostRegion::zeroed(header.shared_bytes).unwrap();
        // SAFETY: the region is at least as large as the header and page aligned.
        unsafe { std::ptr::write(region.as_ptr() as *mut RawGridHeader, header) };
        // SAFETY: the header was written above; the region is returned beside the grid and outlives it.
        (Arc::new(unsafe { SharedGrid::new(region.as_ptr()) }), region)
    }

    /// A launcher with a kernel that leaves as soon as a pause is asked for: relaunches for as long as
    /// `park_if_paused` says so, counting its relaunches in `relaunches`.
    fn launcher(control: Arc<Control>, grid: Arc<SharedGrid>, relaunches: Arc<AtomicU32>) {
        loop {
            while !grid.pause_requested() && !grid.terminate_requested() {
                std::thread::yield_now(); // the kernel runs
            }
            if grid.terminate_requested() || !control.park_if_paused() {
                control.ended();
                return;
            }
            relaunches.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Quiesces back to back: the next one asks for a pause before the launcher has woken from the last one's
    /// resume. The launcher stays parked for it and is still there, relaunching, after all of them; it leaves only
    /// for the terminate (it once took the second pause for a shutdown and left: the device was lost).
    #[test]
    fn a_pause_asked_again_before_the_launcher_woke_keeps_the_kernel() {
        let (grid, _region) = grid();
        let control = Control::new(grid.clone());
        let kernels = Kernels::default();
        let relaunches = Arc::new(AtomicU32::new(0));
        let thread = {
            let (c, g, r) = (control.clone(), grid.clone(), relaunches.clone());
            kernels.launch_first(&control, || std::thread::spawn(move || launcher(c, g, r)))
        };
        let mut frees = 0;
        for _ in 0..300 {
            kernels.quiesced(Duration::from_secs(30), || frees += 1).unwrap();
            assert_ne!(*lock(&control.phase), Phase::Ended, "the launcher left after {frees} quiesces");
        }
        assert_eq!(frees, 300);
        // resumed for good: the launcher relaunches its kernel
        let deadline = Instant::now() + Duration::from_secs(30);
        while relaunches.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the kernel was not relaunched after the last quiesce");
            std::thread::sleep(Duration::from_millis(1));
        }
        grid.request_terminate();
        control.wake();
        thread.join().unwrap();
        assert_eq!(*lock(&control.phase), Phase::Ended);
    }

    /// A kernel registered while a quiesce runs its calls is launched only after them: the calls would wait for
    /// it forever on a GPU.
    #[test]
    fn a_first_launch_waits_for_the_quiesce_under_way() {
        let (grid, _region) = grid();
        let kernels = Arc::new(Kernels::default());
        let launched = Arc::new(AtomicU32::new(0));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let in_calls = {
            let (kernels, launched) = (kernels.clone(), launched.clone());
            std::thread::spawn(move || {
                kernels
                    .quiesced(Duration::from_secs(30), || {
                        entered_tx.send(()).unwrap();
                        // long enough for the launcher below to have launched, were it not held back
                        std::thread::sleep(Duration::from_millis(100));
                        launched.load(Ordering::SeqCst)
                    })
                    .unwrap()
            })
        };
        entered_rx.recv().unwrap();
        let control = Control::new(grid);
        kernels.launch_first(&control, || launched.store(1, Ordering::SeqCst));
        assert_eq!(in_calls.join().unwrap(), 0, "a kernel was launched during the quiesce's calls");
        assert_eq!(launched.load(Ordering::SeqCst), 1);
    }
}
