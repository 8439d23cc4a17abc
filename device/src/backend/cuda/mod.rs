//! The CUDA backend: the same device code, compiled by NVRTC and run as a persistent kernel.
//!
//! Memory: the SHARED region (header, control blocks, command/event rings, inboxes, outboxes) is pinned host
//! memory mapped into the device, so the host and the kernel exchange data with plain loads and stores ordered
//! by release/acquire (`.sys` scope PTX on the device side). The LOCAL region (block 0's records, attention
//! bitmap, kernel-to-kernel rings, state) is device memory: the only place where read-modify-write atomics
//! are used.
//!
//! Start, in order (each step's failure frees what the steps before it took, see `book.rs`): reset the context
//! if a kernel fault poisoned it; load the program (CUBIN, else PTX with the JIT log, `image.rs`); size the grid
//! to what the GPU keeps resident minus what this process's other kernels hold and a headroom; zero the local
//! region and run the init kernel on the device's own stream (so the init is ordered after the memset), with a
//! deadline; measure the device clock against the host's; launch the persistent kernel cooperatively (every
//! block resident, or the launch fails) and wait, with a deadline, until every block has entered it.
//!
//! Running: a launcher thread waits on a blocking-sync event (it sleeps; it does not spin a core) and reports
//! the kernel's end. A kernel fault is reported at once ([`Executor::failure`]): the device declares itself
//! lost with the driver's error as the cause, and the context is reset before the next open.
//!
//! Teardown: terminate, wait (bounded) for the kernel to leave, then release; a release while another
//! device's persistent kernel runs in the same context is deferred (a free would wait for that kernel forever).
//!
//! The driver calls go through [`driver::Driver`]: the real driver (cudarc) or the emulated one that runs the
//! host build of the kernels and enforces the driver's rules (`emulated/`), which is how CI executes this.

mod book;
mod clock;
pub mod driver;
pub mod emulated;
pub mod floor;
mod image;
pub mod nvrtc;
mod quiesce;
mod real;
pub mod source;

use super::Executor;
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::RawGridHeader;
use crate::shared::SharedGrid;
use book::Resources;
use driver::{Driver, DriverError, KernelArgs, Launch};
use emulated::EmulatedDriver;
use quiesce::{Control, PAUSE_WAIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long shutdown waits for the persistent kernel to leave before abandoning it.
const KERNEL_EXIT_WAIT: Duration = Duration::from_secs(5);
/// Threads per block of the persistent kernel (one runs the protocol; a warp is the scheduling unit).
const THREADS: u32 = 32;

/// Loop iterations per launch of the event-driven kernel chosen by `RINGVISOR_BACKEND=cuda-event`.
pub const EVENT_DRIVEN_ITERATIONS: u64 = 4096;

/// How the kernel is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaMode {
    /// Launched once; loops until the device shuts down.
    Persistent,
    /// Launched repeatedly, each launch looping `iterations` times (for drivers that kill long kernels).
    EventDriven {
        /// Loop iterations per launch.
        iterations: u64,
    },
}

/// Which driver runs the backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CudaDriver {
    /// The NVIDIA driver (`libcuda.so`).
    #[default]
    Real,
    /// The emulated driver: host threads run the host build of the kernels; CUDA's rules are enforced as
    /// errors. For tests (`RINGVISOR_BACKEND=cuda-emulated`); not a product backend.
    Emulated(EmulatedDriver),
}

impl CudaDriver {
    /// The driver to call: the NVIDIA one if `libcuda.so` is found (else a clear error), or the emulated one.
    fn open(&self) -> Result<Arc<dyn Driver>, DeviceError> {
        match self {
            CudaDriver::Real if !driver_available() => Err(DeviceError::BackendUnavailable(
                "no CUDA driver (libcuda.so) found; use the CPU backend on this machine".into(),
            )),
            CudaDriver::Real => Ok(Arc::new(real::CudarcDriver)),
            CudaDriver::Emulated(d) => Ok(Arc::new(d.clone())),
        }
    }
}

/// Settings of the CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// CUDA device ordinal.
    pub ordinal: i32,
    /// Persistent or event-driven. A persistent kernel on a GPU whose driver kills long kernels (a display
    /// GPU) runs event-driven instead, with a warning.
    pub mode: CudaMode,
    /// Most messages an actor processes per step.
    pub budget: u32,
    /// The driver.
    pub driver: CudaDriver,
    /// How long start waits for the init and clock kernels, and for every block to enter the persistent
    /// kernel (a block that cannot become resident: another process's kernels fill the GPU).
    pub start_timeout: Duration,
    /// Longest idle pause of an actor block between sweeps of its slots; `None` (the default): sized with the
    /// grid by [`auto_idle_backoff`]. Every idle sweep reads mapped memory across PCIe, so the pause bounds the
    /// bus traffic of idle actors (and block 0's accesses queue behind it) at the cost of the wake-up latency of
    /// an idle actor. (The latency mode keeps it: a 2 µs pause for a small grid measured slower on an H100,
    /// 24.9 µs a call against 19.1, the extra polling slowing the device's own reads; docs/benchmarks.md.)
    pub idle_backoff: Option<Duration>,
}

/// Smallest and largest automatic idle pause of an actor block.
const IDLE_BACKOFF_MIN_NS: u64 = 8_192;
const IDLE_BACKOFF_MAX_NS: u64 = 20_000_000;
/// Automatic idle pause per mapped-memory read of one idle sweep of the whole grid (a block's flags, and each
/// slot's `host_seq`) past the first [`IDLE_READS_FREE`]: a large grid's idle sweeps then read mapped memory
/// about 400,000 times a second at most, whatever its size. Measured on an H200 (PCIe Gen5 x16): small reads of
/// mapped memory by the GPU saturate at about 2.2 million a second; 2,049 blocks sweeping every 131 µs kept
/// every such read waiting about 0.9 ms, block 0's included (230 steps a second, a burst of creates stalled:
/// docs/benchmarks.md).
const IDLE_BACKOFF_PER_READ_NS: u64 = 2_500;
/// Reads per idle sweep a grid may make at the smallest pause (a small device keeps the 8 µs it was measured
/// with: at most 2 million reads a second, the rate its round trips were measured at).
const IDLE_READS_FREE: u64 = 16;

/// The idle pause of the actor blocks of a grid of `blocks` blocks over `slots` slots: 2.5 µs per mapped-memory
/// read of one idle sweep of the grid (`blocks + slots`) past the first 16, at least 8 µs, at most 20 ms. A
/// stopgap until idle actors wait on device memory alone (block 0 forwarding the host's doorbells): an idle
/// actor of a large fleet wakes within milliseconds, not microseconds; set [`CudaConfig::idle_backoff`] to
/// trade otherwise.
pub fn auto_idle_backoff(blocks: u32, slots: u32) -> Duration {
    let reads = (u64::from(blocks) + u64::from(slots)).saturating_sub(IDLE_READS_FREE);
    Duration::from_nanos((reads * IDLE_BACKOFF_PER_READ_NS).clamp(IDLE_BACKOFF_MIN_NS, IDLE_BACKOFF_MAX_NS))
}

impl Default for CudaConfig {
    fn default() -> Self {
        Self {
            ordinal: 0,
            mode: CudaMode::Persistent,
            budget: 64,
            driver: CudaDriver::Real,
            start_timeout: Duration::from_secs(20),
            idle_backoff: None,
        }
    }
}

fn driver_err(e: DriverError) -> DeviceError {
    DeviceError::BackendUnavailable(format!("cuda: {e}"))
}

pub use real::driver_available;

/// What the launcher thread and the executor share.
struct LaunchState {
    /// The kernel's end, when it ended with an error (a fault, or a launch refused).
    failure: Mutex<Option<String>>,
    resources: Mutex<Option<Resources>>,
    /// Pause and resume of the kernel (around another device's driver calls).
    control: Arc<Control>,
}

/// A running persistent kernel and what it uses.
pub(crate) struct CudaExecutor {
    driver: Arc<dyn Driver>,
    /// The shared region (mapped memory owned by the Resources in `state`, freed only in `Drop`, after the
    /// kernel left).
    grid: Arc<SharedGrid>,
    state: Arc<LaunchState>,
    launcher: Mutex<Option<JoinHandle<()>>>,
    description: String,
    stopped: AtomicBool,
    /// The count last seen of each block's doorbell (block 0's unused).
    doorbells_seen: Mutex<Vec<u32>>,
    slots_per_block: u32,
}

/// What start prepares before the persistent launch.
struct Prepared {
    shared_host: *mut u8,
    launch: Launch,
    slots_per_block: u32,
    description: String,
}

/// Polls `done` until it holds, fails, or `limit` passes.
fn wait_until(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> Result<bool, DeviceError>,
) -> Result<(), DeviceError> {
    let deadline = crate::clock::deadline_after(limit);
    let mut retry = crate::wait::Retry::new(Duration::from_micros(200));
    loop {
        if done()? {
            return Ok(());
        }
        if !retry.again(deadline) {
            return Err(DeviceError::BackendUnavailable(format!("cuda: {what} did not happen within {limit:?}")));
        }
    }
}

impl CudaExecutor {
    pub(crate) fn start(
        config: CudaConfig,
        header: RawGridHeader,
        behaviours: &BehaviourSet,
    ) -> Result<Self, DeviceError> {
        if config.budget == 0 {
            return Err(DeviceError::InvalidConfig("cuda backend: budget must be > 0".into()));
        }
        let driver = config.driver.open()?;
        let ordinal = config.ordinal;
        let gpu = driver.gpu(ordinal).map_err(driver_err)?;
        if !gpu.cooperative {
            return Err(DeviceError::BackendUnavailable(format!(
                "cuda: {} does not support cooperative launches (every block resident at once)",
                gpu.name
            )));
        }
        let mut mode = config.mode;
        if gpu.exec_timeout && mode == CudaMode::Persistent {
            tracing::warn!(gpu = %gpu.name, "the driver kills long kernels on this GPU (a display GPU): running \
                the kernel event-driven instead of persistent");
            mode = CudaMode::EventDriven { iterations: EVENT_DRIVEN_ITERATIONS };
        }
        let key = driver.gpu_key(ordinal);
        let generation = book::prepare_context(driver.as_ref(), ordinal, key).map_err(driver_err)?;
        // Everything taken from here on is in `res`: an error releases it (through the book, never under a
        // running kernel).
        let mut res = Resources { ordinal, key, generation, ..Resources::default() };
        // The module load, the allocations, the memset and the short kernels wait for every running kernel of
        // the context: they run while the GPU's other persistent kernels are paused (quiesce.rs).
        let started = book::kernels(key)
            .quiesced(PAUSE_WAIT, || Self::start_in(&driver, &gpu, mode, &config, header, behaviours, &mut res))
            .map_err(|e| DeviceError::BackendUnavailable(format!("cuda: {e}")))
            .and_then(|started| started);
        match started {
            Ok(Prepared { shared_host, launch, slots_per_block, description }) => {
                // SAFETY: the region holds the header written (and calibrated) by start_in; it lives in the
                // Resources of `state` until the executor is dropped.
                let grid = Arc::new(unsafe { SharedGrid::new(shared_host) });
                let state = Arc::new(LaunchState {
                    failure: Mutex::new(None),
                    resources: Mutex::new(Some(res)),
                    control: Control::new(grid.clone()),
                });
                let executor = Self {
                    driver: driver.clone(),
                    grid,
                    state,
                    launcher: Mutex::new(None),
                    description,
                    stopped: AtomicBool::new(false),
                    doorbells_seen: Mutex::new(vec![0; launch.grid as usize]),
                    slots_per_block,
                };
                executor.launch(launch, mode, config.start_timeout)?;
                Ok(executor)
            }
            Err(e) => {
                book::release(&driver, res);
                Err(e)
            }
        }
    }

    /// Steps up to the persistent launch: module, grid, memory, init, clock.
    fn start_in(
        driver: &Arc<dyn Driver>,
        gpu: &driver::GpuInfo,
        mode: CudaMode,
        config: &CudaConfig,
        header: RawGridHeader,
        behaviours: &BehaviourSet,
        res: &mut Resources,
    ) -> Result<Prepared, DeviceError> {
        let d = driver.as_ref();
        let ctx = d.retain_context(res.ordinal).map_err(driver_err)?;
        res.ctx = Some(ctx);
        let program = source::program(behaviours)?;
        let (module, image) = image::load(d, ctx, &program, gpu.arch, &behaviours.host_table())?;
        res.module = Some(module);
        let function = |name| d.function(ctx, module, name).map_err(driver_err);
        let (init_fn, main_fn, clock_fn) =
            (function("rv_init_kernel")?, function("rv_persistent_kernel")?, function("rv_clock_kernel")?);

        // Grid: block 0 plus actor blocks, within what stays resident next to this process's other kernels.
        let capacity = d.blocks_per_sm(ctx, main_fn, THREADS).map_err(driver_err)?.max(1) * gpu.sms;
        let wanted = 1 + header.slot_count;
        let reserved = book::reserve_blocks(res.key, capacity, wanted)
            .map_err(|e| DeviceError::BackendUnavailable(format!("cuda: {e}")))?;
        res.reserved_blocks = reserved;
        let slots_per_block = header.slot_count.div_ceil(reserved - 1);
        let grid = 1 + header.slot_count.div_ceil(slots_per_block);

        let stream = d.create_stream(ctx).map_err(driver_err)?;
        res.stream = Some(stream);
        let event = d.create_blocking_event(ctx).map_err(driver_err)?;
        res.event = Some(event);
        let (shared_host, shared_dev) = d.alloc_mapped(ctx, header.shared_bytes as usize).map_err(driver_err)?;
        res.shared = Some(shared_host);
        let local = d.alloc_device(ctx, header.local_bytes as usize).map_err(driver_err)?;
        res.local = Some(local);

        let run_short = |what: &str, function, args, grid, threads| -> Result<(), DeviceError> {
            d.launch(ctx, &Launch { function, grid, threads, args, stream, cooperative: false }).map_err(driver_err)?;
            wait_until(what, config.start_timeout, || d.stream_done(ctx, stream).map_err(driver_err))
        };
        // The shared region: zeroed and headed by the host (mapped memory; the host writes it directly).
        // SAFETY: `shared_host` points to `shared_bytes` writable bytes; the header fits (shared_bytes > 576).
        unsafe {
            std::ptr::write_bytes(shared_host, 0, header.shared_bytes as usize);
            std::ptr::write(shared_host as *mut RawGridHeader, header);
        }
        // The local region: zeroed on the stream the init kernel runs on, so the init is ordered after it.
        d.memset_zero_async(ctx, local, header.local_bytes as usize, stream).map_err(driver_err)?;
        let init_blocks = header.slot_count.div_ceil(128).clamp(1, 1024);
        run_short("the init kernel", init_fn, KernelArgs::Init { shared: shared_dev, local }, init_blocks, 128)?;

        // The device clock against the host's (clock.rs), through the header's trace cells: nothing uses them
        // before the persistent kernel starts, and they are zeroed again after.
        let cells = std::mem::offset_of!(RawGridHeader, trace_ns);
        // SAFETY: the trace cells (four u64s) are inside the live mapped header, 8-byte aligned.
        let host_cells = unsafe { shared_host.add(cells) } as *mut u64;
        let clock::Calibration { offset_ns: offset, bracket_ns: width } =
            clock::calibrate(d, ctx, clock_fn, stream, host_cells, shared_dev + cells as u64, config.start_timeout)?;
        let field = std::mem::offset_of!(RawGridHeader, clock_offset_ns);
        // SAFETY: inside the live mapped header; the clock kernel has ended and no other kernel reads it now.
        unsafe {
            std::ptr::write_bytes(host_cells, 0, 4);
            std::ptr::write(shared_host.add(field) as *mut i64, offset);
        }
        tracing::debug!(offset_ns = offset, bracket_ns = width, "device clock calibrated");

        let idle_backoff = config.idle_backoff.unwrap_or_else(|| auto_idle_backoff(grid, header.slot_count));
        let actor_backoff_ns = idle_backoff.as_nanos().min(u128::from(u32::MAX)) as u32;
        let iterations = match mode {
            CudaMode::Persistent => 0,
            CudaMode::EventDriven { iterations } => iterations.max(1),
        };
        let launch = Launch {
            function: main_fn,
            grid,
            threads: THREADS,
            args: KernelArgs::Persistent {
                shared: shared_dev,
                local,
                slots_per_block,
                budget: config.budget,
                max_iterations: iterations,
                actor_backoff_ns,
            },
            stream,
            cooperative: true,
        };
        let description = format!(
            "{} {} (sm_{}{}, {image}, {grid} blocks of {capacity} resident, {slots_per_block} slots per block, \
             idle pause {idle_backoff:?}, {mode:?})",
            d.kind(),
            gpu.name,
            gpu.arch.0,
            gpu.arch.1
        );
        Ok(Prepared { shared_host, launch, slots_per_block, description })
    }

    /// Starts the launcher thread and waits until every block of the kernel has entered it.
    fn launch(&self, launch: Launch, mode: CudaMode, timeout: Duration) -> Result<(), DeviceError> {
        let (driver, state, grid) = (self.driver.clone(), self.state.clone(), self.grid.clone());
        let thread = std::thread::Builder::new()
            .name("ringvisor-cuda".into())
            .spawn(move || run_kernel(driver, state, launch, mode, &grid))
            .map_err(|e| DeviceError::InvalidConfig(format!("cannot spawn the launcher thread: {e}")))?;
        *crate::sync::lock(&self.launcher) = Some(thread);
        let handshake = wait_until("every block entering the persistent kernel", timeout, || {
            if let Some(f) = self.failure() {
                return Err(DeviceError::BackendUnavailable(format!("cuda: the kernel failed at start: {f}")));
            }
            Ok(self.grid.blocks_started() >= launch.grid)
        });
        if let Err(e) = handshake {
            self.shutdown();
            return Err(e);
        }
        tracing::info!(description = %self.description, "cuda backend started");
        Ok(())
    }
}

/// The launcher thread: launches the kernel, sleeps on a blocking-sync event until it ends, and relaunches it
/// after a pause (quiesce.rs) and, in event-driven mode, after every bounded run; reports how it ended.
fn run_kernel(driver: Arc<dyn Driver>, state: Arc<LaunchState>, l: Launch, mode: CudaMode, grid: &SharedGrid) {
    let (ctx, event, key) = {
        let res = crate::sync::lock(&state.resources);
        let r = res.as_ref().expect("resources live while the launcher runs");
        (r.ctx.expect("retained"), r.event.expect("created"), r.key)
    };
    // Launched between quiesces, and known to every later one (a device opened right after this one pauses it).
    let mut launched = book::kernels(key).launch_first(&state.control, || driver.launch(ctx, &l));
    if let Some(r) = crate::sync::lock(&state.resources).as_mut() {
        r.kernel_live = launched.is_ok();
    }
    if launched.is_ok() {
        book::kernel_started(key);
    }
    let outcome = loop {
        if let Err(e) =
            launched.and_then(|_| driver.record_event(ctx, event, l.stream)).and_then(|_| driver.wait_event(ctx, event))
        {
            break Err(e);
        }
        if grid.terminate_requested() {
            break Ok(());
        }
        if grid.pause_requested() {
            if !state.control.park_if_paused() {
                break Ok(()); // shut down while parked
            }
        } else if mode == CudaMode::Persistent {
            break Ok(());
        }
        launched = driver.launch(ctx, &l); // after a pause, or the next bounded run
    };
    state.control.ended();
    let sticky = match &outcome {
        Err(e) => {
            tracing::error!(error = %e, "the persistent kernel ended with an error");
            *crate::sync::lock(&state.failure) = Some(e.to_string());
            e.is_sticky().then(|| e.to_string())
        }
        Ok(()) => None,
    };
    if let Some(r) = crate::sync::lock(&state.resources).as_mut() {
        book::kernel_left(&driver, r, sticky);
    }
}

impl Executor for CudaExecutor {
    fn shared_base(&self) -> *mut u8 {
        self.grid.header() as *mut u8
    }

    fn wake(&self) {
        // The host's writes an actor must notice bump that slot's host_seq, which its block reads on every
        // sweep (an idle block backs off at most ~8 us): the write itself is the wake-up.
    }

    fn dirty_slots(&self, mark: &mut dyn FnMut(u32)) -> bool {
        let mut seen = crate::sync::lock(&self.doorbells_seen);
        for (block, last) in (0u32..).zip(seen.iter_mut()).skip(1) {
            let now = self.grid.doorbell(block);
            if now != *last {
                *last = now;
                let first = (block - 1) * self.slots_per_block;
                (first..(first + self.slots_per_block).min(self.grid.slot_count())).for_each(&mut *mark);
            }
        }
        true
    }

    fn failure(&self) -> Option<String> {
        crate::sync::lock(&self.state.failure).clone()
    }

    fn paused(&self) -> bool {
        self.state.control.paused()
    }

    fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.grid.request_terminate();
        self.state.control.wake();
        if let Some(t) = crate::sync::lock(&self.launcher).take() {
            // A kernel that does not leave (a block stuck in a behaviour) must not hang the host: wait a bounded
            // time, then abandon it (its resources stay: see book::release).
            let deadline = Instant::now() + KERNEL_EXIT_WAIT;
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !t.is_finished() {
                tracing::error!("the persistent kernel did not leave within {KERNEL_EXIT_WAIT:?}: abandoning it");
                return;
            }
            if t.join().is_err() {
                tracing::error!("cuda launcher thread panicked");
            }
        }
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(res) = crate::sync::lock(&self.state.resources).take() {
            book::release(&self.driver, res);
        }
    }
}
