//! The CUDA backend: the same device code, compiled by NVRTC and run as a persistent kernel through cudarc.
//!
//! Memory: the SHARED region (header, control blocks, command/event rings, inboxes, outboxes) is pinned host
//! memory mapped into the device (`cuMemHostAlloc(DEVICEMAP)`), so the host and the kernel exchange data with
//! plain loads and stores ordered by release/acquire (`.sys` scope PTX on the device side). The LOCAL region
//! (block 0's records, attention bitmap, kernel-to-kernel rings, state) is device memory: the only place where
//! read-modify-write atomics are used.
//!
//! Launch: one thread per block runs the protocol; block 0 is the device supervisor and blocks 1.. own
//! `slots_per_block` slots each. The grid never exceeds what the device can keep resident at once (queried with
//! the occupancy API), because a persistent block that is not resident would never run.
//!
//! This path cannot run in CI (no GPU); it is compiled there, and its kernel source is compiled by NVRTC for
//! sm_70, sm_80 and sm_90 by `device/tests/nvrtc.rs`.

pub mod nvrtc;
pub mod source;

use super::{DirtySet, Executor};
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::{RawGridHeader, RV_DEVICE_HALT};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// How long shutdown waits for the persistent kernel to leave before abandoning it.
const KERNEL_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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

/// Settings of the CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// CUDA device ordinal.
    pub ordinal: i32,
    /// Persistent or event-driven.
    pub mode: CudaMode,
    /// Most messages an actor processes per step.
    pub budget: u32,
}

impl Default for CudaConfig {
    fn default() -> Self {
        Self { ordinal: 0, mode: CudaMode::Persistent, budget: 64 }
    }
}

fn driver_err(what: &str, e: impl std::fmt::Debug) -> DeviceError {
    DeviceError::BackendUnavailable(format!("cuda {what}: {e:?}"))
}

/// True if the CUDA driver library can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the library.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

struct Launch {
    function: sys::CUfunction,
    stream: sys::CUstream,
    grid: u32,
    slots_per_block: u32,
    budget: u32,
    shared_dev: sys::CUdeviceptr,
    local_dev: sys::CUdeviceptr,
}

// SAFETY: CUDA handles may be used from any thread once the context is current there (the launcher thread
// makes it current before use).
unsafe impl Send for Launch {}

/// A running persistent kernel and the memory it uses.
pub(crate) struct CudaExecutor {
    ctx: sys::CUcontext,
    shared_host: *mut u8,
    local_dev: sys::CUdeviceptr,
    module: sys::CUmodule,
    launcher: Mutex<Option<JoinHandle<Result<(), DeviceError>>>>,
    description: String,
    stopped: std::sync::atomic::AtomicBool,
    /// The kernel did not leave at shutdown: its memory is leaked rather than freed under it.
    abandoned: std::sync::atomic::AtomicBool,
}

// SAFETY: the raw pointers are owned by this executor and freed once, in `shutdown`/`drop`; the shared region
// is accessed through the protocol (see shared.rs).
unsafe impl Send for CudaExecutor {}
// SAFETY: as above; `&self` methods only touch atomics and the launcher mutex.
unsafe impl Sync for CudaExecutor {}

impl CudaExecutor {
    pub(crate) fn start(
        config: CudaConfig,
        header: RawGridHeader,
        behaviours: &BehaviourSet,
    ) -> Result<Self, DeviceError> {
        if !driver_available() {
            return Err(DeviceError::BackendUnavailable(
                "no CUDA driver (libcuda.so) found; use the CPU backend on this machine".into(),
            ));
        }
        if config.budget == 0 {
            return Err(DeviceError::InvalidConfig("cuda backend: budget must be > 0".into()));
        }
        result::init().map_err(|e| driver_err("init", e))?;
        let dev = result::device::get(config.ordinal).map_err(|e| driver_err("device", e))?;
        // SAFETY: `dev` was returned by device::get.
        let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| driver_err("context", e))?;
        // SAFETY: `ctx` was just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| driver_err("context", e))?;
        let attr = |a| {
            // SAFETY: `dev` is valid.
            unsafe { result::device::get_attribute(dev, a) }.map_err(|e| driver_err("attribute", e))
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32;
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown".into());

        let program = source::program(behaviours)?;
        // PTX for the device's own virtual architecture, JIT-compiled by the driver.
        let ptx = nvrtc::compile(&program, "ringvisor.cu", major, minor, nvrtc::Output::Ptx)?;
        let ptx = CString::from_vec_with_nul(ptx)
            .or_else(|e| CString::new(e.into_bytes()))
            .map_err(|_| DeviceError::InvalidConfig("nvrtc returned PTX with an interior NUL".into()))?;
        // SAFETY: a NUL-terminated PTX image.
        let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void) }
            .map_err(|e| driver_err("module load", e))?;
        let get = |n: &str| {
            let c = CString::new(n).expect("no NUL");
            // SAFETY: `module` is loaded; the name is NUL-terminated.
            unsafe { result::module::get_function(module, c) }.map_err(|e| driver_err("get function", e))
        };
        let init_fn = get("rv_init_kernel")?;
        let main_fn = get("rv_persistent_kernel")?;

        // Memory: shared = mapped pinned host memory; local = device memory.
        let shared_bytes = header.shared_bytes as usize;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: plain allocation; zeroed below before any use.
        let shared_host =
            unsafe { result::malloc_host(shared_bytes, flags) }.map_err(|e| driver_err("host alloc", e))? as *mut u8;
        // SAFETY: `shared_host` points to `shared_bytes` writable bytes; the header fits (shared_bytes > 576).
        unsafe {
            std::ptr::write_bytes(shared_host, 0, shared_bytes);
            std::ptr::write(shared_host as *mut RawGridHeader, header);
        }
        let mut shared_dev: sys::CUdeviceptr = 0;
        // SAFETY: `shared_host` was allocated with DEVICEMAP in the current context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut shared_dev, shared_host as *mut c_void, 0) }
            .result()
            .map_err(|e| driver_err("map host memory", e))?;
        // SAFETY: plain device allocation, zeroed before use.
        let local_dev =
            unsafe { result::malloc_sync(header.local_bytes as usize) }.map_err(|e| driver_err("device alloc", e))?;
        // SAFETY: `local_dev` has local_bytes bytes.
        unsafe { result::memset_d8_sync(local_dev, 0, header.local_bytes as usize) }
            .map_err(|e| driver_err("memset", e))?;

        // Grid sizing: every block must be resident at once.
        // SAFETY: `main_fn` is a valid function of the loaded module.
        let per_sm = unsafe { result::occupancy::max_active_block_per_multiprocessor(main_fn, 32, 0) }
            .map_err(|e| driver_err("occupancy", e))?
            .max(1) as u32;
        let resident = (per_sm * sms).max(2);
        let actor_blocks = (resident - 1).min(header.slot_count).max(1);
        let slots_per_block = header.slot_count.div_ceil(actor_blocks);
        let grid = 1 + header.slot_count.div_ceil(slots_per_block);

        let stream =
            result::stream::create(result::stream::StreamKind::NonBlocking).map_err(|e| driver_err("stream", e))?;
        // Initialise the local region (k2k sequence numbers) with the same C function the CPU backend uses.
        {
            let mut s = shared_dev;
            let mut l = local_dev;
            let mut params = [&mut s as *mut _ as *mut c_void, &mut l as *mut _ as *mut c_void];
            let blocks = header.slot_count.div_ceil(128).max(1);
            // SAFETY: the kernel takes (void*, void*); both point to live allocations.
            unsafe { result::launch_kernel(init_fn, (blocks, 1, 1), (128, 1, 1), 0, stream, &mut params) }
                .map_err(|e| driver_err("init launch", e))?;
            // SAFETY: `stream` is live.
            unsafe { result::stream::synchronize(stream) }.map_err(|e| driver_err("init sync", e))?;
        }

        let launch =
            Launch { function: main_fn, stream, grid, slots_per_block, budget: config.budget, shared_dev, local_dev };
        let mode = config.mode;
        let ctx_addr = ctx as usize;
        let shared_addr = shared_host as usize;
        let launcher = std::thread::Builder::new()
            .name("ringvisor-cuda".into())
            .spawn(move || run_kernel(ctx_addr as sys::CUcontext, launch, mode, shared_addr))
            .map_err(|e| DeviceError::InvalidConfig(format!("cannot spawn the launcher thread: {e}")))?;
        let description =
            format!("cuda {name} (sm_{major}{minor}, {grid} blocks, {slots_per_block} slots per block, {mode:?})");
        tracing::info!(%description, "cuda backend started");
        Ok(Self {
            ctx,
            shared_host,
            local_dev,
            module,
            launcher: Mutex::new(Some(launcher)),
            description,
            stopped: std::sync::atomic::AtomicBool::new(false),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// Launches the kernel (once, or repeatedly in event-driven mode) and waits for it to leave.
fn run_kernel(ctx: sys::CUcontext, mut l: Launch, mode: CudaMode, shared_host: usize) -> Result<(), DeviceError> {
    // SAFETY: the context is retained by the executor for as long as this thread runs.
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| driver_err("context", e))?;
    let iterations: u64 = match mode {
        CudaMode::Persistent => 0,
        CudaMode::EventDriven { iterations } => iterations.max(1),
    };
    let terminate = |h: usize| {
        let header = h as *mut RawGridHeader;
        // SAFETY: the header lives in the shared region, valid while the executor lives.
        unsafe {
            let acquire = std::sync::atomic::Ordering::Acquire;
            crate::shared::load_u32(std::ptr::addr_of_mut!((*header).terminate), acquire) != 0
                || crate::shared::load_u32(std::ptr::addr_of_mut!((*header).device_faults), acquire) & RV_DEVICE_HALT
                    != 0
        }
    };
    loop {
        let mut iters = iterations;
        let mut params = [
            &mut l.shared_dev as *mut _ as *mut c_void,
            &mut l.local_dev as *mut _ as *mut c_void,
            &mut l.slots_per_block as *mut _ as *mut c_void,
            &mut l.budget as *mut _ as *mut c_void,
            &mut iters as *mut _ as *mut c_void,
        ];
        // SAFETY: the parameters match rv_persistent_kernel's signature and point to live locals; the memory
        // they point to outlives the launch (the executor waits for this thread before freeing it).
        unsafe { result::launch_kernel(l.function, (l.grid, 1, 1), (32, 1, 1), 0, l.stream, &mut params) }
            .map_err(|e| driver_err("launch", e))?;
        // SAFETY: `stream` is live.
        unsafe { result::stream::synchronize(l.stream) }.map_err(|e| driver_err("kernel", e))?;
        if iterations == 0 || terminate(shared_host) {
            return Ok(());
        }
    }
}

impl Executor for CudaExecutor {
    fn shared_base(&self) -> *mut u8 {
        self.shared_host
    }

    fn wake(&self) {
        // The kernel polls with a bounded backoff (at most ~8 us); nothing to do.
    }

    fn dirty_slots(&self) -> Option<&DirtySet> {
        None
    }

    fn shutdown(&self) {
        if self.stopped.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let header = self.shared_host as *mut RawGridHeader;
        // SAFETY: the header is in the live shared region.
        unsafe {
            crate::shared::store_u32(
                std::ptr::addr_of_mut!((*header).terminate),
                1,
                std::sync::atomic::Ordering::Release,
            )
        };
        if let Some(t) = crate::sync::lock(&self.launcher).take() {
            // A kernel that does not leave (a block stuck in a behaviour, a lost device) must not hang the host:
            // wait a bounded time, then abandon it (and its memory, see Drop).
            let deadline = std::time::Instant::now() + KERNEL_EXIT_WAIT;
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if !t.is_finished() {
                tracing::error!("the persistent kernel did not leave within {KERNEL_EXIT_WAIT:?}: abandoning it");
                self.abandoned.store(true, std::sync::atomic::Ordering::Release);
                return;
            }
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "persistent kernel ended with an error"),
                Err(_) => tracing::error!("cuda launcher thread panicked"),
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
        if self.abandoned.load(std::sync::atomic::Ordering::Acquire) {
            return; // the kernel may still touch its memory: leak it rather than free it under the kernel
        }
        // SAFETY: the kernel has left (shutdown joined the launcher); each resource is freed once.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            let _ = result::module::unload(self.module);
            let _ = result::free_sync(self.local_dev);
            let _ = result::free_host(self.shared_host as *mut c_void);
        }
    }
}
