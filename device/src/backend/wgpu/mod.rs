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

mod mirror;
pub(crate) mod program;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::cpu::{DirtySet, HostRegion};
use super::Executor;
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::*;
use crate::sync::lock;
use crate::wait::{IdleBackoff, Parker};
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
}

impl Default for WgpuConfig {
    fn default() -> Self {
        Self {
            slots_per_group: 16,
            budget: 64,
            rounds_per_submit: 2,
            park_max: Duration::from_millis(5),
            adapter: None,
        }
    }
}

/// The GPU objects of one device.
struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    shared: wgpu::Buffer,
    params: wgpu::Buffer,
    steps: wgpu::Buffer,
    readback: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
    /// The step dispatch's indirect arguments, bound apart (see rv_port.wgsl).
    step_grid: wgpu::Buffer,
    step_grid_group: wgpu::BindGroup,
    supervisor: wgpu::ComputePipeline,
    scan: wgpu::ComputePipeline,
    step: wgpu::ComputePipeline,
    /// Scan workgroups, as a 2-D grid (x, y).
    groups: (u32, u32),
    /// The most workgroups a dispatch's x dimension takes.
    max_groups_x: u32,
    /// Bytes of the step words (dispatch count, results OR, replied bits).
    steps_bytes: u64,
    /// Where the step words lie in the read-back buffer (after the shared region's copy).
    steps_at: u64,
}

/// Storage buffers the program binds: the shared and local regions, the step words, the work list, the step grid.
const STORAGE_BUFFERS: u32 = 5;

/// Per-submit parameters (`rv_submit_params` in rv_port.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SubmitParams {
    now: [u32; 2],
    now_ms: [u32; 2],
    monotonic: [u32; 2],
    slots_per_group: u32,
    budget: u32,
    zero: u32,
    max_groups_x: u32,
    pad: [u32; 2],
}

fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

struct WgpuShared {
    _region: HostRegion,
    host: HostWords,
    header: RawGridHeader,
    config: WgpuConfig,
    terminate: AtomicBool,
    parker: Parker,
    dirty: DirtySet,
    host_wake: Arc<dyn Fn() + Send + Sync>,
    latency_mode: bool,
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

/// The adapters wgpu finds (Vulkan), by name, for messages and for tests that need one.
pub fn adapters() -> Vec<String> {
    let instance = instance();
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .iter()
        .map(|a| format!("{} ({:?})", a.get_info().name, a.get_info().device_type))
        .collect()
}

/// Whether the first adapter wgpu finds (Vulkan) has shader f64, which the `sensor` behaviour needs on this
/// backend; false without an adapter.
pub fn shader_f64() -> bool {
    let instance = instance();
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .first()
        .is_some_and(|a| a.features().contains(wgpu::Features::SHADER_F64))
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
    desc.backends = wgpu::Backends::VULKAN;
    wgpu::Instance::new(desc)
}

fn no_adapter(why: String) -> DeviceError {
    DeviceError::BackendUnavailable(format!(
        "wgpu backend: {why} (on Debian, Mesa's software Vulkan driver provides one: apt-get install \
         mesa-vulkan-drivers)"
    ))
}

impl Gpu {
    fn open(
        config: &WgpuConfig,
        header: &RawGridHeader,
        behaviours: &BehaviourSet,
    ) -> Result<(Gpu, String), DeviceError> {
        let instance = instance();
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let adapter = adapters
            .into_iter()
            .filter(|a| config.adapter.as_ref().is_none_or(|want| a.get_info().name.contains(want.as_str())))
            .min_by_key(|a| match a.get_info().device_type {
                wgpu::DeviceType::DiscreteGpu => 0,
                wgpu::DeviceType::IntegratedGpu => 1,
                wgpu::DeviceType::VirtualGpu => 2,
                wgpu::DeviceType::Cpu => 3,
                wgpu::DeviceType::Other => 4,
            })
            .ok_or_else(|| match &config.adapter {
                Some(want) => no_adapter(format!("no Vulkan adapter named like `{want}`")),
                None => no_adapter("no Vulkan adapter found".into()),
            })?;
        let info = adapter.get_info();
        let name = format!("{} ({:?}, {})", info.name, info.device_type, info.driver_info);
        let limits = adapter.limits();
        let largest = header.shared_bytes.max(header.local_bytes);
        let fits = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size).min(u64::from(u32::MAX));
        if largest > fits {
            return Err(DeviceError::InvalidConfig(format!(
                "wgpu backend: a region of {largest} bytes does not fit a storage buffer of adapter `{}` (at most \
                 {fits} bytes): use fewer slots or smaller rings",
                info.name
            )));
        }
        if limits.max_storage_buffers_per_shader_stage < STORAGE_BUFFERS {
            return Err(no_adapter(format!(
                "adapter `{}` binds at most {} storage buffers per shader stage; the program needs {STORAGE_BUFFERS}",
                info.name, limits.max_storage_buffers_per_shader_stage
            )));
        }
        // Shader f64 where the adapter has it (Vulkan drivers of NVIDIA, AMD, lavapipe; not Metal): the behaviours
        // that compute in f64 run only then.
        let f64 = adapter.features().contains(wgpu::Features::SHADER_F64);
        let missing = program::missing_behaviours(behaviours, f64);
        if !missing.is_empty() {
            tracing::warn!(
                ?missing,
                f64,
                "wgpu backend: these behaviours have no WGSL version this adapter runs; creating them is rejected"
            );
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("ringvisor"),
            required_features: if f64 { wgpu::Features::SHADER_F64 } else { wgpu::Features::empty() },
            required_limits: wgpu::Limits {
                max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
                max_buffer_size: limits.max_buffer_size,
                max_storage_buffers_per_shader_stage: STORAGE_BUFFERS,
                ..wgpu::Limits::downlevel_defaults()
            },
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| no_adapter(format!("adapter `{}` refused a device: {e}", info.name)))?;

        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("ringvisor protocol"),
            source: wgpu::ShaderSource::Wgsl(program::source(behaviours, f64).into()),
        });
        let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ringvisor regions"),
            entries: &[
                storage(0),
                storage(1),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                storage(3),
                storage(4),
            ],
        });
        let grid_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ringvisor step grid"),
            entries: &[storage(0)],
        });
        let with_grid = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ringvisor: regions and step grid"),
            bind_group_layouts: &[Some(&layout), Some(&grid_layout)],
            immediate_size: 0,
        });
        let regions_only = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ringvisor: regions"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry: &str, layout: &wgpu::PipelineLayout| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let supervisor = pipeline("rv_supervisor_main", &with_grid);
        let scan = pipeline("rv_actor_scan_main", &with_grid);
        let step = pipeline("rv_actor_step_main", &regions_only);
        let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages| {
            device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
        };
        let copy = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let shared = buffer("shared region", header.shared_bytes, wgpu::BufferUsages::STORAGE | copy);
        let local = buffer("local region", header.local_bytes, wgpu::BufferUsages::STORAGE | copy);
        let params = buffer(
            "submit params",
            size_of::<SubmitParams>() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let steps_bytes = 4 * (2 + u64::from(header.slot_count.div_ceil(32)));
        let steps = buffer("step words", steps_bytes, wgpu::BufferUsages::STORAGE | copy);
        let steps_at = header.shared_bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT * 64);
        let readback =
            buffer("read back", steps_at + steps_bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let work = buffer("work list", 4 * (1 + u64::from(header.slot_count)), wgpu::BufferUsages::STORAGE);
        let step_grid = buffer(
            "step grid",
            16,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT | wgpu::BufferUsages::COPY_DST,
        );
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ringvisor regions"),
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: shared.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: local.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: steps.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: work.as_entire_binding() },
            ],
        });
        let step_grid_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ringvisor step grid"),
            layout: &grid_layout,
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: step_grid.as_entire_binding() }],
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(DeviceError::InvalidConfig(format!("wgpu backend: the WGSL program was refused: {error}")));
        }
        // The local region's initial values whose zero is not "none": each kernel-to-kernel cell's sequence
        // number is its index (rv_init_local_slot in the C code).
        let cell = size_of::<RawK2kCell>() as u64;
        let seq = std::mem::offset_of!(RawK2kCell, seq) as u64;
        let mut words = vec![0u32; (header.local_bytes / 4) as usize];
        let cells = u64::from(header.slot_count) * u64::from(header.k2k_capacity);
        for i in 0..cells {
            // cell i is cell i % k2k_capacity of its slot's ring
            words[((header.off_k2k_cells + i * cell + seq) / 4) as usize] = (i % u64::from(header.k2k_capacity)) as u32;
        }
        queue.write_buffer(&local, 0, bytemuck::cast_slice(&words));
        let total_groups = header.slot_count.div_ceil(config.slots_per_group);
        let max = device.limits().max_compute_workgroups_per_dimension.max(1);
        let groups = (total_groups.min(max), total_groups.div_ceil(max));
        Ok((
            Gpu {
                device,
                queue,
                shared,
                params,
                steps,
                readback,
                bind_group,
                step_grid,
                step_grid_group,
                supervisor,
                scan,
                step,
                groups,
                max_groups_x: max,
                steps_bytes,
                steps_at,
            },
            name,
        ))
    }
}

impl Gpu {
    /// Runs each pipeline once over the still-empty regions (a zero header: no slots, no commands), so the driver
    /// compiles the program now, inside `Device::open`, and not during the first round, where a device's
    /// liveness is judged and a command waits. lavapipe compiles at first use and takes tens of seconds for
    /// this program on a cold cache (Mesa keeps it in its shader cache afterwards).
    fn warm_up(&self) -> Result<(), DeviceError> {
        let started = std::time::Instant::now();
        // The step dispatch first, while its grid is (1, 1, 1): an empty work list makes its one workgroup return.
        self.queue.write_buffer(&self.step_grid, 0, bytemuck::cast_slice(&[1u32, 1, 1, 0]));
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("warm up") });
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("warm up"), timestamp_writes: None });
            pass.set_bind_group(0, &self.bind_group, &[]);
            pass.set_bind_group(1, &self.step_grid_group, &[]);
            pass.set_pipeline(&self.step);
            pass.dispatch_workgroups_indirect(&self.step_grid, 0);
            pass.set_pipeline(&self.supervisor);
            pass.dispatch_workgroups(1, 1, 1);
            pass.set_pipeline(&self.scan);
            pass.dispatch_workgroups(1, 1, 1);
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.queue.submit([encoder.finish()]);
        self.device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(Duration::from_secs(600)) })
            .map_err(|e| DeviceError::InvalidConfig(format!("wgpu backend: compiling the program failed: {e}")))?;
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(DeviceError::InvalidConfig(format!("wgpu backend: the first dispatch was refused: {error}")));
        }
        tracing::debug!(took = ?started.elapsed(), "wgpu backend: program compiled");
        Ok(())
    }
}

impl WgpuExecutor {
    /// Opens an adapter, compiles the program for `behaviours` and starts the executor thread over a fresh host
    /// region laid out by `header`.
    pub(crate) fn start(
        config: WgpuConfig,
        header: RawGridHeader,
        behaviours: &BehaviourSet,
        host_wake: Arc<dyn Fn() + Send + Sync>,
        latency_mode: bool,
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
            host_wake,
            latency_mode,
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

fn now_ns(clock: SystemTime) -> u64 {
    clock.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
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
    run_rounds(s, &gpu);
    drop(gpu);
    drop(live);
}

fn run_rounds(s: &WgpuShared, gpu: &Gpu) {
    let mut mirror = Mirror::new(s.header, &s.host);
    let mut backoff = IdleBackoff::new(2, s.config.park_max).latency_mode(s.latency_mode);
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
                (s.host_wake)();
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
    let now = now_ns(SystemTime::now());
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
            pass.set_pipeline(&gpu.supervisor);
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
        (s.host_wake)();
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
