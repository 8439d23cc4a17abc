//! Executors of the device code. The CPU backend runs the protocol on a pool of host threads; the CUDA backend
//! runs it as a persistent kernel; the WebGPU backend runs its WGSL port in rounds of dispatches. All lay out
//! memory with the same C function (`rv_compute_layout`).

pub mod cpu;
mod cpu_pool;
pub mod cuda;
mod dirty_set;
pub(crate) mod region;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use std::sync::Arc;

use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::{RawGridHeader, RawGridParams};
use crate::wait::HostThreads;

/// Which executor runs the device code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Host threads run the real step functions (always available).
    Cpu(cpu::CpuConfig),
    /// A persistent CUDA kernel (needs an NVIDIA driver and NVRTC at run time).
    Cuda(cuda::CudaConfig),
    /// The protocol in WGSL, run in rounds of dispatches by a host thread through wgpu (needs a Vulkan adapter;
    /// Mesa's lavapipe runs it on the CPU).
    #[cfg(feature = "wgpu")]
    Wgpu(self::wgpu::WgpuConfig),
}

/// The environment variable that picks the default backend: `cpu`, `cuda` (persistent kernel),
/// `cuda-event` (event-driven kernel), `cuda-emulated` (the CUDA backend over the emulated driver, for
/// tests), or `wgpu` (WebGPU, with the `wgpu` feature). Unset: `cpu`.
pub const BACKEND_ENV: &str = "RINGVISOR_BACKEND";

const BACKEND_NAMES: &str = "`cpu`, `cuda`, `cuda-event`, `cuda-emulated` or `wgpu`";

impl Backend {
    /// The CUDA backend on a new emulated GPU (host threads run the host build of the kernels; the driver's
    /// rules are enforced as errors). For tests: it executes the CUDA backend's host code without a GPU.
    pub fn cuda_emulated(gpu: cuda::emulated::EmulatedGpu) -> Backend {
        Backend::Cuda(cuda::CudaConfig {
            driver: cuda::CudaDriver::Emulated(cuda::emulated::EmulatedDriver::new(gpu)),
            ..cuda::CudaConfig::default()
        })
    }

    /// The backend named by `name` (`cpu`, `cuda`, `cuda-event`, `cuda-emulated`, `wgpu`), with default
    /// settings. `wgpu` without the `wgpu` feature is an error that says so.
    pub fn parse(name: &str) -> Result<Backend, DeviceError> {
        match name.trim() {
            "cpu" => Ok(Backend::Cpu(cpu::CpuConfig::default())),
            "cuda" => Ok(Backend::Cuda(cuda::CudaConfig::default())),
            "cuda-event" => Ok(Backend::Cuda(cuda::CudaConfig {
                mode: cuda::CudaMode::EventDriven { iterations: cuda::EVENT_DRIVEN_ITERATIONS },
                ..cuda::CudaConfig::default()
            })),
            "cuda-emulated" => Ok(Backend::cuda_emulated(cuda::emulated::EmulatedGpu::default())),
            #[cfg(feature = "wgpu")]
            "wgpu" => Ok(Backend::Wgpu(self::wgpu::WgpuConfig::default())),
            #[cfg(not(feature = "wgpu"))]
            "wgpu" => Err(DeviceError::BackendUnavailable(
                "the wgpu backend is not in this build: enable ringvisor-device's `wgpu` feature".into(),
            )),
            other => Err(DeviceError::InvalidConfig(format!("unknown backend `{other}`: expected {BACKEND_NAMES}"))),
        }
    }

    /// The backend named by [`BACKEND_ENV`], or the CPU backend when it is unset. A value that names no backend
    /// is an error.
    pub fn from_env() -> Result<Backend, DeviceError> {
        match std::env::var(BACKEND_ENV) {
            Ok(name) => Backend::parse(&name).map_err(|_| {
                DeviceError::InvalidConfig(format!("{BACKEND_ENV}=`{name}` names no backend: expected {BACKEND_NAMES}"))
            }),
            Err(_) => Ok(Backend::Cpu(cpu::CpuConfig::default())),
        }
    }
}

impl Default for Backend {
    /// The backend named by [`BACKEND_ENV`] (the CPU backend when unset). A misspelt value falls back to the CPU
    /// backend here and is reported as an error by `Device::open`.
    fn default() -> Self {
        Backend::from_env().unwrap_or_else(|_| Backend::Cpu(cpu::CpuConfig::default()))
    }
}

/// What an executor whose work runs on host threads tells the device's host side (the CPU and WebGPU backends; a
/// GPU kernel cannot): that it published something for the host to read.
pub(crate) trait HostSide: Send + Sync {
    /// Replies or events were published: the host's reader (the poller) is woken to read them.
    fn published(&self);
    /// Block 0 published events (a failure, a restart's outcome), told by an executor thread that holds nothing of
    /// the device (no slot's step, no block 0 lock): the host reads them on this thread now if no one else is
    /// reading the device, else as [`HostSide::published`]. A restart's notice then wakes no poller on its way to
    /// the supervisor.
    fn events_published(&self) {
        self.published();
    }
}

/// A closure is a host side that only wakes (the executors' tests).
#[cfg(test)]
impl<F: Fn() + Send + Sync> HostSide for F {
    fn published(&self) {
        self();
    }
}

/// Starts the executor `backend` names over regions laid out by `header`. `host_side` is told when the executor
/// published events or replies (the CPU and WebGPU backends tell it; a GPU kernel cannot). `threads` says how the
/// executor's own host threads wait (in the latency mode, the CPU backend's workers never park) and are scheduled.
pub(crate) fn start(
    backend: &Backend,
    header: RawGridHeader,
    behaviours: &BehaviourSet,
    host_side: Arc<dyn HostSide>,
    threads: HostThreads,
) -> Result<Box<dyn Executor>, DeviceError> {
    Ok(match backend {
        Backend::Cpu(config) => {
            Box::new(cpu::CpuExecutor::start(config.clone(), header, behaviours.host_table(), host_side, threads)?)
        }
        Backend::Cuda(config) => Box::new(cuda::CudaExecutor::start(config.clone(), header, behaviours)?),
        #[cfg(feature = "wgpu")]
        Backend::Wgpu(config) => {
            Box::new(self::wgpu::WgpuExecutor::start(config.clone(), header, behaviours, host_side, threads)?)
        }
    })
}

/// What the device layer needs from an executor.
pub(crate) trait Executor: Send + Sync {
    /// The base of the shared region (header first).
    fn shared_base(&self) -> *mut u8;
    /// The host wrote a command or a message: make sure someone will look soon.
    fn wake(&self);
    /// The host gave `slot` work (a message, a fault; published before this call): make sure its actor runs
    /// soon. Executors that sweep every slot only wake.
    fn mark_work(&self, slot: u32) {
        let _ = slot;
        self.wake();
    }
    /// The host read cells of an outbox, whose room is the device's again: wake whatever waits for that room.
    fn outbox_read(&self) {
        self.wake();
    }
    /// Whether the device code records traced messages (`RV_FLAG_TRACE`, [`crate::Device::trace_call`]): the
    /// CPU and CUDA backends run `kernels/`' C, which does; the WebGPU program does not (WGSL has no clock).
    fn records_traces(&self) -> bool {
        true
    }
    /// Calls `mark` for each slot where replies may be waiting since the last call (made by whoever holds the
    /// device's poll state: the poller, a caller polling in its place, a CPU worker reading the events it
    /// published). False if the executor cannot tell: the reader sweeps every slot.
    fn dirty_slots(&self, mark: &mut dyn FnMut(u32)) -> bool;
    /// Stops executing; afterwards nothing touches the regions. Idempotent.
    fn shutdown(&self);
    /// A host thread waiting on this device (a caller past its busy window, a producer for inbox room) is about to
    /// yield its CPU: an executor whose threads may be queued on that CPU behind it moves one elsewhere (the CPU
    /// backend in the latency mode: see `cpu_placement`).
    fn host_waiter_yields(&self) {}
    /// Looked at every few milliseconds by the device's poller: the CPU backend replaces a worker stuck in a
    /// behaviour that never returns.
    fn tend(&self) {}
    /// A short description for logs and benchmarks.
    fn describe(&self) -> String;
    /// True while the executor is paused on purpose (the CUDA backend pauses its kernel while another device of
    /// the GPU loads its module): block 0's heartbeat stands still without the device being lost.
    fn paused(&self) -> bool {
        false
    }
    /// Why the executor stopped executing on its own (a kernel fault, with the driver's error); `None` while
    /// it runs or after an ordinary shutdown.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// Joins an executor thread, unless the caller is that thread (the last handle of a device can be dropped by
/// the device's own threads; a thread cannot join itself).
#[cfg(feature = "wgpu")]
pub(crate) fn join_executor_thread(thread: std::thread::JoinHandle<()>) {
    if thread.thread().id() != std::thread::current().id() {
        let _ = thread.join();
    }
}

/// How long a shutdown waits for an executor's worker to leave before it abandons it.
pub(crate) const WORKER_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Joins `thread` if it leaves by `deadline`; otherwise abandons it (a worker stuck in a behaviour that never
/// returns): the shutdown does not hang, and what the worker uses stays allocated, since the worker holds it.
pub(crate) fn join_executor_thread_by(thread: std::thread::JoinHandle<()>, deadline: std::time::Instant) {
    if thread.thread().id() == std::thread::current().id() {
        return;
    }
    while !thread.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    if thread.is_finished() {
        let _ = thread.join();
    } else {
        tracing::error!(
            thread = thread.thread().name().unwrap_or("?"),
            "an executor worker did not leave (stuck in a behaviour that never returns?): abandoned, its device's \
             memory kept for it"
        );
    }
}

/// Computes the layout for `params` (the C function both backends share) and returns the header to write.
pub(crate) fn compute_layout(params: &RawGridParams) -> Result<RawGridHeader, DeviceError> {
    // SAFETY: RawGridHeader is plain data; all-zero is a valid value that rv_compute_layout overwrites.
    let mut header: RawGridHeader = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call; the function only writes `header`.
    let rc = unsafe { crate::ffi::rv_compute_layout(params, &mut header) };
    if rc != 0 {
        return Err(DeviceError::InvalidConfig(format!(
            "the device rejected the layout {params:?}: capacities must be powers of two (at most 2^20), \
             slot_count between 1 and 2^24, state_bytes a non-zero multiple of 64, bulk_bytes 0 or a power of \
             two from 256 to 2^24"
        )));
    }
    Ok(header)
}

#[cfg(test)]
mod builtin_tables {
    use crate::behaviour::BUILTIN_BEHAVIOURS;

    /// The one list of built-ins (`kernels/rv_builtins.h`): (id, name) in id order.
    fn the_list() -> Vec<(u32, String)> {
        include_str!("../../../kernels/rv_builtins.h")
            .lines()
            .filter_map(|l| l.trim().strip_prefix("X(")?.split_once(')').map(|(args, _)| args.to_string()))
            .map(|args| {
                let (id, name) = args.split_once(',').expect("X(id, name)");
                (id.trim().parse().expect("a numeric id"), name.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn every_table_of_built_ins_follows_the_one_list() {
        let list = the_list();
        assert_eq!(list.len(), BUILTIN_BEHAVIOURS.len(), "{list:?}");
        for ((id, name), (rust_name, rust_id, function)) in list.iter().zip(BUILTIN_BEHAVIOURS) {
            assert_eq!((rust_name, rust_id, function), (name.as_str(), *id, format!("rv_behaviour_{name}").as_str()));
            let path = format!("behaviours/{name}.cu");
            assert!(super::cuda::source::KERNEL_FILES.iter().any(|(p, _)| *p == path), "{path} not embedded");
            // SAFETY: only looks the id up in the linked kernel library's table.
            assert!(unsafe { crate::ffi::rv_builtin_behaviour(*id) }.is_some(), "the host table lacks {name}");
        }
        let includes: Vec<String> = include_str!("../../../kernels/builtins.cu")
            .lines()
            .filter_map(|l| l.strip_prefix("#include \"behaviours/")?.strip_suffix(".cu\"").map(str::to_string))
            .collect();
        assert_eq!(includes, list.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>(), "builtins.cu includes");
        #[cfg(feature = "wgpu")]
        {
            let wgsl: Vec<(&str, &str)> =
                super::wgpu::program::WGSL_BEHAVIOURS.iter().map(|(n, f, _)| (*n, *f)).collect();
            let expected: Vec<(String, String)> =
                list.iter().map(|(_, n)| (n.clone(), format!("rv_behaviour_{n}"))).collect();
            let wgsl: Vec<(String, String)> = wgsl.iter().map(|(n, f)| (n.to_string(), f.to_string())).collect();
            assert_eq!(wgsl, expected, "WGSL_BEHAVIOURS");
        }
        // SAFETY: as above.
        assert!(unsafe { crate::ffi::rv_builtin_behaviour(list.len() as u32 + 1) }.is_none(), "nothing past the list");
    }
}
