//! The CUDA driver calls the backend makes, behind one small interface: [`CudarcDriver`] calls the real driver
//! (`libcuda.so`, through cudarc); the emulated driver (`emulated/`) runs the host build of the kernels and
//! enforces the driver's rules as errors, so the backend's host code executes in CI, where there is no GPU.
//!
//! Handles are plain integers (the real driver's pointers, or the emulated driver's ids): the interface is
//! object-safe and a handle never outlives the executor that owns it.
//!
//! [`CudarcDriver`]: super::real::CudarcDriver

use crate::ffi::BehaviourFn;

/// A driver error: which call failed, the driver's code (`CUDA_ERROR_*`), and the JIT log where there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverError {
    /// The driver call (`cuMemAlloc`, `cuLaunchCooperativeKernel`, ...).
    pub call: &'static str,
    /// The driver's error name (`CUDA_ERROR_ILLEGAL_ADDRESS`, ...).
    pub code: String,
    /// The JIT compiler's log, for a module that did not load.
    pub log: Option<String>,
}

impl DriverError {
    /// An error of `call` with `code`.
    pub fn new(call: &'static str, code: impl Into<String>) -> Self {
        Self { call, code: code.into(), log: None }
    }

    /// True for the errors after which the context is unusable until it is reset (a fault in a kernel).
    pub fn is_sticky(&self) -> bool {
        const STICKY: &[&str] = &[
            "CUDA_ERROR_ILLEGAL_ADDRESS",
            "CUDA_ERROR_LAUNCH_FAILED",
            "CUDA_ERROR_HARDWARE_STACK_ERROR",
            "CUDA_ERROR_ILLEGAL_INSTRUCTION",
            "CUDA_ERROR_MISALIGNED_ADDRESS",
            "CUDA_ERROR_INVALID_ADDRESS_SPACE",
            "CUDA_ERROR_INVALID_PC",
            "CUDA_ERROR_ASSERT",
            "CUDA_ERROR_LAUNCH_TIMEOUT",
            "CUDA_ERROR_ECC_UNCORRECTABLE",
        ];
        STICKY.contains(&self.code.as_str())
    }
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.code)?;
        if let Some(log) = &self.log {
            write!(f, "; JIT log: {}", log.trim())?;
        }
        Ok(())
    }
}

/// What the backend needs to know about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// The device's name.
    pub name: String,
    /// Compute capability (major, minor).
    pub arch: (u32, u32),
    /// Streaming multiprocessors.
    pub sms: u32,
    /// The driver kills kernels that run longer than a few seconds (a GPU that drives a display).
    pub exec_timeout: bool,
    /// The device supports cooperative launches (every block resident at once, or the launch fails).
    pub cooperative: bool,
}

/// A module image, as the driver loads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleImage {
    /// Machine code for one real architecture (`sm_XY`).
    Cubin {
        /// The architecture, (major, minor).
        arch: (u32, u32),
        /// The ELF image.
        bytes: Vec<u8>,
    },
    /// PTX, JIT-compiled by the driver at load.
    Ptx {
        /// The PTX text (NUL-terminated).
        text: Vec<u8>,
    },
    /// No image: the device program was not compiled (no NVRTC on this machine). Only the emulated driver
    /// loads it, resolving the entry points to the host build.
    HostOnly,
}

/// Context, module, function, stream and event handles.
pub type Handle = u64;

/// A device pointer.
pub type DevPtr = u64;

/// The kernels of the device program and their arguments.
#[derive(Clone, Copy, Debug)]
pub enum KernelArgs {
    /// `rv_init_kernel(shared, local)`.
    Init {
        /// The shared region, as the device sees it.
        shared: DevPtr,
        /// The local region.
        local: DevPtr,
    },
    /// `rv_persistent_kernel(shared, local, slots_per_block, budget, max_iterations, actor_backoff_ns)`.
    Persistent {
        /// The shared region, as the device sees it.
        shared: DevPtr,
        /// The local region.
        local: DevPtr,
        /// Slots each actor block owns.
        slots_per_block: u32,
        /// Most messages an actor processes per step.
        budget: u32,
        /// 0: until terminate or pause; otherwise the iterations of one launch (event-driven mode).
        max_iterations: u64,
        /// Longest idle pause of an actor block between sweeps, in nanoseconds.
        actor_backoff_ns: u32,
    },
    /// `rv_clock_kernel(cells, rounds)`: the clock probe's answering thread (`clock.rs`).
    Clock {
        /// Three u64 cells: the host's round, the device's clock, the round answered (mapped host memory, as the
        /// device sees it).
        cells: DevPtr,
        /// Rounds to answer.
        rounds: u64,
    },
    /// `rv_floor_kernel(req, resp, n)`: the floor probe's answering thread (`floor.rs`).
    Floor {
        /// The host's sequence number (mapped host memory, as the device sees it).
        req: DevPtr,
        /// The answer (mapped host memory, as the device sees it).
        resp: DevPtr,
        /// Answers to give.
        n: u32,
    },
    /// `rv_empty_kernel()`: does nothing (the cost of a launch).
    Empty,
}

impl KernelArgs {
    /// The entry point's name in the device program.
    pub fn entry(&self) -> &'static str {
        match self {
            KernelArgs::Init { .. } => "rv_init_kernel",
            KernelArgs::Persistent { .. } => "rv_persistent_kernel",
            KernelArgs::Clock { .. } => "rv_clock_kernel",
            KernelArgs::Floor { .. } => "rv_floor_kernel",
            KernelArgs::Empty => "rv_empty_kernel",
        }
    }
}

/// One kernel launch.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The function (from [`Driver::function`]).
    pub function: Handle,
    /// Blocks.
    pub grid: u32,
    /// Threads per block.
    pub threads: u32,
    /// The kernel and its arguments.
    pub args: KernelArgs,
    /// The stream it is ordered on.
    pub stream: Handle,
    /// `cuLaunchCooperativeKernel`: every block resident at once, or the launch fails.
    pub cooperative: bool,
}

/// The driver calls the CUDA backend makes. Every call that needs a context takes it and makes it current on
/// the calling thread first.
pub trait Driver: Send + Sync {
    /// A short name for descriptions (`cuda`, `emulated cuda`).
    fn kind(&self) -> &'static str;
    /// Identifies the GPU `ordinal` within the process (for the residency and release book-keeping).
    fn gpu_key(&self, ordinal: i32) -> u64;
    /// Initialises the driver and describes GPU `ordinal`.
    fn gpu(&self, ordinal: i32) -> Result<GpuInfo, DriverError>;
    /// Retains GPU `ordinal`'s primary context.
    fn retain_context(&self, ordinal: i32) -> Result<Handle, DriverError>;
    /// Releases one retention of the primary context.
    fn release_context(&self, ordinal: i32) -> Result<(), DriverError>;
    /// Destroys everything in the primary context and clears its sticky error (retentions stay; each is still
    /// released once). Only while no kernel of the context can be running.
    fn reset_context(&self, ordinal: i32) -> Result<(), DriverError>;
    /// False if the driver can run the device program without a compiled image (the emulated driver runs the
    /// host build; the real one needs CUBIN or PTX).
    fn needs_image(&self) -> bool {
        true
    }
    /// Loads a module. `host_table` is the host behaviour table (only the emulated driver uses it).
    fn load_module(
        &self,
        ctx: Handle,
        image: &ModuleImage,
        host_table: &[Option<BehaviourFn>],
    ) -> Result<Handle, DriverError>;
    /// The function `name` of `module`.
    fn function(&self, ctx: Handle, module: Handle, name: &str) -> Result<Handle, DriverError>;
    /// Unloads a module (synchronises with the context's kernels).
    fn unload_module(&self, ctx: Handle, module: Handle) -> Result<(), DriverError>;
    /// How many blocks of `threads` threads of `function` one multiprocessor keeps resident.
    fn blocks_per_sm(&self, ctx: Handle, function: Handle, threads: u32) -> Result<u32, DriverError>;
    /// Pinned host memory mapped into the device: (host pointer, device pointer). Contents undefined.
    fn alloc_mapped(&self, ctx: Handle, bytes: usize) -> Result<(*mut u8, DevPtr), DriverError>;
    /// Frees [`Driver::alloc_mapped`] memory (synchronises with the context's kernels).
    fn free_mapped(&self, ctx: Handle, host: *mut u8) -> Result<(), DriverError>;
    /// Device memory. Contents undefined.
    fn alloc_device(&self, ctx: Handle, bytes: usize) -> Result<DevPtr, DriverError>;
    /// Frees device memory (synchronises with the context's kernels).
    fn free_device(&self, ctx: Handle, ptr: DevPtr) -> Result<(), DriverError>;
    /// A stream that does not synchronise with the legacy default stream.
    fn create_stream(&self, ctx: Handle) -> Result<Handle, DriverError>;
    /// Destroys a stream (after its work completes).
    fn destroy_stream(&self, ctx: Handle, stream: Handle) -> Result<(), DriverError>;
    /// Zeroes `bytes` bytes at `ptr`, ordered on `stream`.
    fn memset_zero_async(&self, ctx: Handle, ptr: DevPtr, bytes: usize, stream: Handle) -> Result<(), DriverError>;
    /// Launches a kernel.
    fn launch(&self, ctx: Handle, launch: &Launch) -> Result<(), DriverError>;
    /// True if everything ordered on `stream` has completed; the error of a failed kernel otherwise.
    fn stream_done(&self, ctx: Handle, stream: Handle) -> Result<bool, DriverError>;
    /// An event whose synchronisation blocks the waiting thread (`CU_EVENT_BLOCKING_SYNC`) instead of spinning.
    fn create_blocking_event(&self, ctx: Handle) -> Result<Handle, DriverError>;
    /// Records `event` on `stream`.
    fn record_event(&self, ctx: Handle, event: Handle, stream: Handle) -> Result<(), DriverError>;
    /// Waits for `event` (and so for everything ordered before it on its stream).
    fn wait_event(&self, ctx: Handle, event: Handle) -> Result<(), DriverError>;
    /// Destroys an event.
    fn destroy_event(&self, ctx: Handle, event: Handle) -> Result<(), DriverError>;
}
