//! The WebGPU backend: the protocol in WGSL (`kernels/wgsl/`), run by an event-driven executor through wgpu.
//!
//! WebGPU has no persistent kernels (a mapped buffer cannot be used by the GPU, shader loops must end, nothing
//! guarantees forward progress across workgroups, watchdogs reset long dispatches), so one host thread drives the
//! device in rounds. A round uploads what the host wrote (see [`mirror`]), submits `rounds_per_submit` steps of
//! three dispatches (block 0's workgroup; the scan, one workgroup per `slots_per_group` slots, which lists the
//! slots that have work; one workgroup per listed slot, an indirect dispatch), reads back what the device wrote
//! and publishes it to the host region. Idle slots cost the scan's check only: a shader compiler that runs
//! divergent branches under an execution mask (lavapipe) would otherwise pay for the whole step on every slot.
//! The dispatch boundary is the only fence between workgroups, so a kernel-to-kernel message written in one
//! dispatch is consumed in a later one. Idle, the thread parks and is woken by host writes; it still submits
//! every `park_max`, so block 0's heartbeat and idle actors' beats move.

mod gpu;
mod mirror;
pub(crate) mod program;
pub use gpu::{adapters, shader_f64};
pub use program::check;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::dirty_set::DirtySet;
use super::region::HostRegion;
use super::{Executor, HostSide};
use crate::behaviour::BehaviourSet;
use crate::clock::unix_now_ns;
use crate::error::DeviceError;
use crate::layout::*;
use crate::sync::lock;
use crate::wait::{HostThreads, IdleBackoff, Parker};
use gpu::{split, Gpu, SubmitParams};
use mirror::{HostWords, Mirror};

/// Settings of the WebGPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgpuConfig {
    /// Slots one workgroup of the scan checks for work (each slot with work then gets a workgroup of its own).
    pub slots_per_group: u32,
    /// Most messages an actor processes per step.
    pub budget: u32,
    /// Steps per submit (block 0, then the actors): a create needs two (block 0 prepares, the actor runs the
    /// init, block 0 reports), a call one.
    pub rounds_per_submit: u32,
    /// Longest park of the idle executor (block 0's heartbeat moves at least this often).
    pub park_max: Duration,
    /// Use only an adapter whose name contains this (e.g. `llvmpipe`); any adapter when `None`.
    pub adapter: Option<String>,
    /// Test hook: rewrites the generated WGSL program before it is compiled, so that a test can plant a
    /// divergence from the C protocol and prove the differential test finds it (`device/tests/differential.rs`).
    /// `None` in every real use.
    #[doc(hidden)]
    pub program_edit: Option<ProgramEdit>,
}

/// A rewrite of the generated WGSL program ([`WgpuConfig::program_edit`]); for tests only.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct ProgramEdit(pub fn(String) -> String);

impl PartialEq for ProgramEdit {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for ProgramEdit {}

impl Default for WgpuConfig {
    fn default() -> Self {
        Self {
            slots_per_group: 16,
            budget: 64,
            rounds_per_submit: 2,
            park_max: Duration::from_millis(5),
            adapter: None,
            program_edit: None,
        }
    }
}

struct WgpuShared {
    _region: HostRegion,
    host: HostWords,
    header: RawGridHeader,
    config: WgpuConfig,
    terminate: AtomicBool,
    parker: Parker,
    dirty: DirtySet,
    host_side: Arc<dyn HostSide>,
    /// How the executor thread waits (in the latency mode it never parks) and is scheduled.
    threads: HostThreads,
    failure: Mutex<Option<String>>,
    adapter: String,
}

/// The WebGPU executor: owns the host region, the GPU objects (on its thread) and that thread.
pub(crate) struct WgpuExecutor {
    shared: Arc<WgpuShared>,
    base: *mut u8,
    thread: Mutex<Option<JoinHandle<()>>>,
}

// SAFETY: `base` points into the region owned by `shared`, used only through SharedGrid's protocol.
unsafe impl Send for WgpuExecutor {}
// SAFETY: as above.
unsafe impl Sync for WgpuExecutor {}

impl WgpuExecutor {
    /// Opens an adapter, compiles the program for `behaviours` and starts the executor thread over a fresh host
    /// region laid out by `header`.
    pub(crate) fn start(
        config: WgpuConfig,
        header: RawGridHeader,
        behaviours: &BehaviourSet,
        host_side: Arc<dyn HostSide>,
        threads: HostThreads,
    ) -> Result<Self, DeviceError> {
        if config.slots_per_group == 0 || config.budget == 0 || config.rounds_per_submit == 0 {
            return Err(DeviceError::InvalidConfig(
                "wgpu backend: slots_per_group, budget and rounds_per_submit must be > 0".into(),
            ));
        }
        let region = HostRegion::zeroed(header.shared_bytes)?;
        // SAFETY: the region is at least shared_bytes >= sizeof(header) long and 4096-aligned.
        unsafe { std::ptr::write(region.as_ptr() as *mut RawGridHeader, header) };
        let base = region.as_ptr();
        let (gpu, adapter) = Gpu::open(&config, &header, behaviours)?;
        gpu.warm_up()?;
        let shared = Arc::new(WgpuShared {
            host: HostWords::new(base, header.shared_bytes as usize),
            _region: region,
            header,
            config,
            terminate: AtomicBool::new(false),
            parker: Parker::new(),
            dirty: DirtySet::new(header.slot_count),
            host_side,
            threads,
            failure: Mutex::new(None),
            adapter,
        });
        register_exit_handler();
        let s = shared.clone();
        let live = LiveThread::new();
        let thread = std::thread::Builder::new()
            .name("ringvisor-wgpu".into())
            .spawn(move || run(&s, gpu, live))
            .map_err(|e| DeviceError::InvalidConfig(format!("wgpu backend: cannot spawn its thread: {e}")))?;
        tracing::debug!(adapter = %shared.adapter, slots = header.slot_count, "wgpu backend started");
        Ok(Self { shared, base, thread: Mutex::new(Some(thread)) })
    }
}

/// Executor threads alive in this process, and the flag that stops them all at process exit.
static LIVE_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// At process exit, stops every executor thread before the Vulkan driver's own exit handlers run (they were
/// registered earlier, so they run later): a thread still inside the driver while its exit handlers tear it down
/// crashes the process (seen with lavapipe when the last `Device` handle was dropped by its poller thread after
/// `main` had returned). Waits at most two seconds.
extern "C" fn stop_executors_at_exit() {
    EXITING.store(true, Ordering::Release);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while LIVE_THREADS.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn register_exit_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` with no captured state; atexit may be called at any time.
        if unsafe { libc::atexit(stop_executors_at_exit) } != 0 {
            tracing::warn!("wgpu backend: could not register the exit handler that stops executor threads");
        }
    });
}

/// Counts an executor thread as alive while it exists.
struct LiveThread;

impl LiveThread {
    fn new() -> Self {
        LIVE_THREADS.fetch_add(1, Ordering::AcqRel);
        Self
    }
}

impl Drop for LiveThread {
    fn drop(&mut self) {
        LIVE_THREADS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The executor thread: rounds until terminate, a halt injected into the device, a GPU error, or process exit.
/// The GPU objects are dropped on this thread before it counts itself gone.
fn run(s: &WgpuShared, gpu: Gpu, live: LiveThread) {
    s.threads.enter();
    run_rounds(s, &gpu);
    drop(gpu);
    drop(live);
}

fn run_rounds(s: &WgpuShared, gpu: &Gpu) {
    let mut mirror = Mirror::new(s.header, &s.host);
    let mut backoff = IdleBackoff::new(8, s.config.park_max).latency_mode(s.threads.latency_mode);
    let started = std::time::Instant::now();
    let terminate = std::mem::offset_of!(RawGridHeader, terminate);
    let faults = std::mem::offset_of!(RawGridHeader, device_faults);
    while !s.terminate.load(Ordering::Acquire) && !EXITING.load(Ordering::Acquire) {
        let seen = s.parker.epoch();
        if s.host.load(terminate) != 0 || s.host.load(faults) & RV_DEVICE_HALT != 0 {
            // The kernel has left (terminate) or the device is lost for good (halt): nothing runs any more.
            s.parker.park(seen, s.config.park_max);
            continue;
        }
        match round(s, gpu, &mut mirror, started) {
            Ok(progress) => {
                if progress {
                    backoff.reset();
                } else {
                    backoff.idle(&s.parker, seen);
                }
            }
            Err(why) => {
                tracing::error!(%why, "wgpu backend stopped");
                *lock(&s.failure) = Some(why);
                s.host_side.published();
                return;
            }
        }
    }
}

/// One round: upload, submit, read back, publish. Returns whether any step made progress.
fn round(s: &WgpuShared, gpu: &Gpu, mirror: &mut Mirror, started: std::time::Instant) -> Result<bool, String> {
    let h = &s.header;
    for upload in mirror.uploads(&s.host) {
        gpu.queue.write_buffer(&gpu.shared, upload.offset, bytemuck::cast_slice(&upload.words));
    }
    let now = unix_now_ns();
    let params = SubmitParams {
        now: split(now),
        now_ms: split(now / 1_000_000),
        monotonic: split(started.elapsed().as_nanos() as u64 + 1),
        slots_per_group: s.config.slots_per_group,
        budget: s.config.budget,
        zero: 0,
        max_groups_x: gpu.max_groups_x,
        pad: [0; 2],
    };
    gpu.queue.write_buffer(&gpu.params, 0, bytemuck::bytes_of(&params));
    let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("round") });
    encoder.clear_buffer(&gpu.steps, 4, None);
    {
        let mut pass =
            encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("steps"), timestamp_writes: None });
        pass.set_bind_group(0, &gpu.bind_group, &[]);
        pass.set_bind_group(1, &gpu.step_grid_group, &[]);
        for _ in 0..s.config.rounds_per_submit {
            // block 0 (and a fresh work list), the scan for slots with work, one workgroup per such slot
            pass.set_pipeline(&gpu.keeper);
            pass.dispatch_workgroups(1, 1, 1);
            pass.set_pipeline(&gpu.scan);
            pass.dispatch_workgroups(gpu.groups.0, gpu.groups.1, 1);
            pass.set_pipeline(&gpu.step);
            pass.dispatch_workgroups_indirect(&gpu.step_grid, 0);
        }
    }
    // Read back what the device writes: header, control blocks, (commands,) events; outboxes and doorbells; the
    // outbox bulk areas; and the step words.
    let ranges = [(0, h.off_inboxes), (h.off_outboxes, h.off_inbox_bulk), (h.off_outbox_bulk, h.shared_bytes)];
    for (from, to) in ranges {
        if to > from {
            encoder.copy_buffer_to_buffer(&gpu.shared, from, &gpu.readback, from, to - from);
        }
    }
    encoder.copy_buffer_to_buffer(&gpu.steps, 0, &gpu.readback, gpu.steps_at, gpu.steps_bytes);
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    gpu.queue.submit([encoder.finish()]);
    let slice = gpu.readback.slice(..);
    let mapped = Arc::new(Mutex::new(None));
    let done = mapped.clone();
    slice.map_async(wgpu::MapMode::Read, move |r| *lock(&done) = Some(r));
    gpu.device
        .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(Duration::from_secs(30)) })
        .map_err(|e| format!("the GPU did not finish a round: {e}"))?;
    if let Some(error) = pollster::block_on(scope.pop()) {
        return Err(format!("a round was refused: {error}"));
    }
    match lock(&mapped).take() {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(format!("reading the device back failed: {e}")),
        None => return Err("reading the device back did not complete".into()),
    }
    let (progress, published) = {
        let view = slice.get_mapped_range().map_err(|e| format!("reading the device back failed: {e}"))?;
        let words: &[u32] = bytemuck::cast_slice(&view);
        let steps = &words[(gpu.steps_at / 4) as usize..];
        let published = mirror.write_back(&s.host, words, &mut |slot| s.dirty.mark_word(slot, 1));
        (steps[1] & RV_STEP_PROGRESS != 0, published)
    };
    gpu.readback.unmap();
    if published {
        s.host_side.published();
    }
    Ok(progress)
}

impl Executor for WgpuExecutor {
    fn shared_base(&self) -> *mut u8 {
        self.base
    }

    fn wake(&self) {
        self.shared.parker.wake();
    }

    fn records_traces(&self) -> bool {
        false
    }

    fn dirty_slots(&self, mark: &mut dyn FnMut(u32)) -> bool {
        self.shared.dirty.drain(mark);
        true
    }

    fn shutdown(&self) {
        self.shared.terminate.store(true, Ordering::Release);
        self.shared.parker.wake();
        if let Some(t) = lock(&self.thread).take() {
            super::join_executor_thread(t);
        }
    }

    fn describe(&self) -> String {
        format!(
            "wgpu on {} ({} slots per scan workgroup, {} steps per submit)",
            self.shared.adapter, self.shared.config.slots_per_group, self.shared.config.rounds_per_submit
        )
    }

    fn failure(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }
}

impl Drop for WgpuExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}
