//! An emulated CUDA driver: the CUDA backend's host code runs against it in CI, where there is no GPU.
//!
//! What it does: allocations come from host memory (device memory starts as garbage, as `cuMemAlloc`'s does);
//! a module resolves to the host build of the kernel entry points (`kernels/rv_entry.cu`, the same code NVRTC
//! compiles); a persistent launch runs one host thread per block, each block waiting for a resident block slot
//! of the emulated GPU (`sms * blocks_per_sm`) as hardware does; short kernels run on one thread; streams order
//! work as CUDA orders it; each block's clock has an epoch of its own, as `%globaltimer` has.
//!
//! The real driver's rules, enforced as errors the backend sees (and logged in [`EmulatedDriver::violations`]
//! when the real driver would hang or corrupt rather than fail):
//! - a module load or unload, an allocation (device or mapped host memory), a memset or a free while a
//!   persistent kernel of the context runs (the real call waits for every kernel of the context: forever; seen
//!   on an H200 for `cuModuleLoadDataEx`, the CUDA programming guide's implicit-synchronisation rules for the
//!   allocations and the memset);
//! - a persistent grid launched without the cooperative launch (its blocks are not guaranteed co-resident);
//! - a cooperative grid larger than the resident capacity (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`);
//! - a kernel on one stream using memory a memset on another stream may not have finished with;
//! - any call on a context after a kernel fault (the sticky error) until the context is reset;
//! - PTX newer than the driver's JIT (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`, with a JIT log); a CUBIN for
//!   another architecture (`CUDA_ERROR_NO_BINARY_FOR_GPU`);
//! - on a GPU with an execution timeout, an unbounded kernel killed after [`EXEC_TIMEOUT`]
//!   (`CUDA_ERROR_LAUNCH_TIMEOUT`).
//!
//! What it does not prove: anything about the GPU's memory model (host threads are more strongly ordered than
//! PCIe and the GPU's L1), timing, occupancy, or code generation (the NVRTC tests check the device program).
//! It is a test double for the backend's host code, not a product backend.

mod gpu;
mod state;
#[cfg(test)]
mod tests;

pub use gpu::{EmulatedGpu, DEFAULT_MAPPED_LATENCY, DEFAULT_MAPPED_READ_COST};

use super::driver::{DevPtr, Driver, DriverError, GpuInfo, Handle, KernelArgs, Launch, ModuleImage};
use crate::ffi::{self, BehaviourFn};
use crate::layout::RawGridHeader;
use state::{block_done, kill_all, lock, observed, ptx_version, wait_resident, Emu, Kernel, Region};
use std::alloc::Layout;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long an unbounded kernel lives on an emulated GPU with an execution timeout.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(2);

static NEXT_KEY: AtomicU64 = AtomicU64::new(1 << 32);

/// The emulated driver (one emulated GPU, ordinal 0). Clone it to open several devices on the same GPU.
#[derive(Clone)]
pub struct EmulatedDriver {
    gpu: EmulatedGpu,
    key: u64,
    clock_skew_ns: i64,
    emu: Arc<Emu>,
}

impl std::fmt::Debug for EmulatedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedDriver").field("gpu", &self.gpu).field("key", &self.key).finish()
    }
}

impl PartialEq for EmulatedDriver {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for EmulatedDriver {}

impl EmulatedDriver {
    /// A new emulated GPU. Its device clock counts from about one second ago (like a GPU's timer since boot),
    /// not from the host's epoch.
    pub fn new(gpu: EmulatedGpu) -> Self {
        let clock_skew_ns = 1_000_000_000 - crate::clock::unix_now_ns() as i64;
        Self { gpu, key: NEXT_KEY.fetch_add(1, Ordering::Relaxed), clock_skew_ns, emu: Arc::new(Emu::default()) }
    }

    /// Every call that would have hung or corrupted memory on the real driver, in order.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.emu).violations.clone()
    }

    /// Allocations, modules, streams and events alive now.
    pub fn resources(&self) -> usize {
        let st = lock(&self.emu);
        st.regions.len() + st.modules.len() + st.streams.len() + st.events.len()
    }

    /// Resources still alive when the last retention of the context was released (never freed by the backend).
    pub fn leaked(&self) -> usize {
        lock(&self.emu).leaked
    }

    /// Retentions of the primary context held now.
    pub fn retained(&self) -> u32 {
        lock(&self.emu).retained
    }

    /// Kernels running now.
    pub fn running_kernels(&self) -> usize {
        lock(&self.emu).kernels.len()
    }

    /// Waits on a blocking-sync event for a kernel that was still running (the launcher sleeping, not spinning).
    pub fn blocking_waits(&self) -> u64 {
        self.emu.blocking_waits.load(Ordering::Relaxed)
    }

    /// Context resets so far.
    pub fn resets(&self) -> u32 {
        self.emu.resets.load(Ordering::Relaxed)
    }

    /// Pretends another process's kernels hold `blocks` resident blocks (0 gives them back): this process's
    /// blocks beyond what is left wait, as they would on hardware.
    pub fn occupy(&self, blocks: u32) {
        let mut st = lock(&self.emu);
        st.resident = st.resident - st.foreign + blocks;
        st.foreign = blocks;
        self.emu.changed.notify_all();
    }

    /// Makes every running kernel fail with `code` (as an illegal address in a behaviour would): they stop, and
    /// the context keeps the error until it is reset.
    pub fn inject_kernel_fault(&self, code: &str) {
        kill_all(&self.emu, &mut lock(&self.emu), DriverError::new("kernel", code));
    }

    fn capacity(&self) -> u32 {
        self.gpu.sms * self.gpu.blocks_per_sm
    }

    fn alloc(&self, call: &'static str, bytes: usize, fill: u8) -> Result<usize, DriverError> {
        let mut st = lock(&self.emu);
        st.usable(call)?;
        st.no_persistent_kernel(call)?;
        let layout = Layout::from_size_align(bytes.max(1), 4096)
            .map_err(|_| DriverError::new(call, "CUDA_ERROR_OUT_OF_MEMORY"))?;
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(DriverError::new(call, "CUDA_ERROR_OUT_OF_MEMORY"));
        }
        // SAFETY: `ptr` has `layout.size()` bytes.
        unsafe { std::ptr::write_bytes(ptr, fill, layout.size()) };
        st.regions.insert(ptr as usize, Region { size: bytes, layout, pending_memset: None });
        Ok(ptr as usize)
    }

    fn free(&self, call: &'static str, addr: usize) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        st.usable(call)?;
        st.no_persistent_kernel(call)?;
        let r = st.regions.remove(&addr).ok_or_else(|| DriverError::new(call, "CUDA_ERROR_INVALID_VALUE"))?;
        // SAFETY: allocated by `alloc` with this layout; no kernel runs.
        unsafe { std::alloc::dealloc(addr as *mut u8, r.layout) };
        Ok(())
    }
}

impl Driver for EmulatedDriver {
    fn kind(&self) -> &'static str {
        "emulated cuda"
    }

    fn gpu_key(&self, _ordinal: i32) -> u64 {
        self.key
    }

    fn needs_image(&self) -> bool {
        false
    }

    fn gpu(&self, ordinal: i32) -> Result<GpuInfo, DriverError> {
        if ordinal != 0 {
            return Err(DriverError::new("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE"));
        }
        Ok(GpuInfo {
            name: self.gpu.name.clone(),
            arch: self.gpu.arch,
            sms: self.gpu.sms,
            exec_timeout: self.gpu.exec_timeout,
            cooperative: true,
        })
    }

    fn retain_context(&self, ordinal: i32) -> Result<Handle, DriverError> {
        self.gpu(ordinal)?;
        let mut st = lock(&self.emu);
        st.retained += 1;
        Ok(1)
    }

    fn release_context(&self, _ordinal: i32) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        if st.retained == 0 {
            return Err(DriverError::new("cuDevicePrimaryCtxRelease", "CUDA_ERROR_INVALID_CONTEXT"));
        }
        st.retained -= 1;
        if st.retained == 0 && st.kernels.is_empty() {
            // the context is destroyed: whatever the backend did not free is counted as leaked
            st.leaked += st.free_all();
            st.sticky = None;
        }
        Ok(())
    }

    fn reset_context(&self, _ordinal: i32) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        // A reset waits for the (killed) kernels' threads to leave before the memory goes.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !st.kernels.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(st.violation("cuDevicePrimaryCtxReset", "a kernel of the context is still running".into()));
            }
            st = self.emu.changed.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        st.free_all();
        st.sticky = None;
        self.emu.resets.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn load_module(
        &self,
        _ctx: Handle,
        image: &ModuleImage,
        host_table: &[Option<BehaviourFn>],
    ) -> Result<Handle, DriverError> {
        const CALL: &str = "cuModuleLoadDataEx";
        let mut st = lock(&self.emu);
        st.usable(CALL)?;
        st.no_persistent_kernel(CALL)?;
        match image {
            ModuleImage::Cubin { arch, bytes } => {
                if !bytes.starts_with(b"\x7fELF") {
                    return Err(DriverError::new(CALL, "CUDA_ERROR_INVALID_IMAGE"));
                }
                if *arch != self.gpu.arch {
                    return Err(DriverError {
                        call: CALL,
                        code: "CUDA_ERROR_NO_BINARY_FOR_GPU".into(),
                        log: Some(format!("the image is for sm_{}{}", arch.0, arch.1)),
                    });
                }
            }
            ModuleImage::Ptx { text } => {
                let version = ptx_version(text).ok_or_else(|| DriverError::new(CALL, "CUDA_ERROR_INVALID_PTX"))?;
                if version > self.gpu.max_ptx_version {
                    let (max, v) = (self.gpu.max_ptx_version, version);
                    return Err(DriverError {
                        call: CALL,
                        code: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION".into(),
                        log: Some(format!(
                            "ptxas application ptx input, line 1; fatal   : Unsupported .version {}.{}; current \
                             version is '{}.{}'",
                            v.0, v.1, max.0, max.1
                        )),
                    });
                }
            }
            ModuleImage::HostOnly => {}
        }
        let h = st.handle();
        st.modules.insert(h, host_table.into());
        Ok(h)
    }

    fn function(&self, _ctx: Handle, module: Handle, name: &str) -> Result<Handle, DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuModuleGetFunction")?;
        if !st.modules.contains_key(&module) {
            return Err(DriverError::new("cuModuleGetFunction", "CUDA_ERROR_INVALID_HANDLE"));
        }
        let entry = ["rv_init_kernel", "rv_persistent_kernel", "rv_clock_kernel", "rv_floor_kernel", "rv_empty_kernel"]
            .into_iter()
            .find(|e| *e == name)
            .ok_or_else(|| DriverError::new("cuModuleGetFunction", "CUDA_ERROR_NOT_FOUND"))?;
        let h = st.handle();
        st.functions.insert(h, (module, entry));
        Ok(h)
    }

    fn unload_module(&self, _ctx: Handle, module: Handle) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuModuleUnload")?;
        st.no_persistent_kernel("cuModuleUnload")?;
        st.modules
            .remove(&module)
            .map(|_| ())
            .ok_or_else(|| DriverError::new("cuModuleUnload", "CUDA_ERROR_INVALID_HANDLE"))
    }

    fn blocks_per_sm(&self, _ctx: Handle, _function: Handle, _threads: u32) -> Result<u32, DriverError> {
        lock(&self.emu).usable("cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
        Ok(self.gpu.blocks_per_sm)
    }

    fn alloc_mapped(&self, _ctx: Handle, bytes: usize) -> Result<(*mut u8, DevPtr), DriverError> {
        let addr = self.alloc("cuMemHostAlloc", bytes, 0x5A)?;
        Ok((addr as *mut u8, addr as DevPtr))
    }

    fn free_mapped(&self, _ctx: Handle, host: *mut u8) -> Result<(), DriverError> {
        self.free("cuMemFreeHost", host as usize)
    }

    fn alloc_device(&self, _ctx: Handle, bytes: usize) -> Result<DevPtr, DriverError> {
        Ok(self.alloc("cuMemAlloc", bytes, 0xA5)? as DevPtr)
    }

    fn free_device(&self, _ctx: Handle, ptr: DevPtr) -> Result<(), DriverError> {
        self.free("cuMemFree", ptr as usize)
    }

    fn create_stream(&self, _ctx: Handle) -> Result<Handle, DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuStreamCreate")?;
        let h = st.handle();
        st.streams.insert(h, Vec::new());
        Ok(h)
    }

    fn destroy_stream(&self, _ctx: Handle, stream: Handle) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuStreamDestroy")?;
        match st.streams.get(&stream) {
            None => Err(DriverError::new("cuStreamDestroy", "CUDA_ERROR_INVALID_HANDLE")),
            Some(running) if !running.is_empty() => {
                Err(st.violation("cuStreamDestroy", "the stream still has a kernel running".into()))
            }
            Some(_) => {
                st.streams.remove(&stream);
                Ok(())
            }
        }
    }

    fn memset_zero_async(&self, _ctx: Handle, ptr: DevPtr, bytes: usize, stream: Handle) -> Result<(), DriverError> {
        const CALL: &str = "cuMemsetD8Async";
        let mut st = lock(&self.emu);
        st.usable(CALL)?;
        st.no_persistent_kernel(CALL)?;
        if !st.streams.contains_key(&stream) {
            return Err(DriverError::new(CALL, "CUDA_ERROR_INVALID_HANDLE"));
        }
        let (addr, size) = match st.region_of(ptr) {
            Some((a, r)) => (a, r.size),
            None => return Err(DriverError::new(CALL, "CUDA_ERROR_INVALID_VALUE")),
        };
        if ptr as usize + bytes > addr + size {
            return Err(DriverError::new(CALL, "CUDA_ERROR_INVALID_VALUE"));
        }
        // SAFETY: inside a live allocation (checked above).
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        st.ops += 1;
        let op = st.ops;
        st.regions.get_mut(&addr).expect("found above").pending_memset = Some((stream, op));
        Ok(())
    }

    fn launch(&self, _ctx: Handle, l: &Launch) -> Result<(), DriverError> {
        let call = if l.cooperative { "cuLaunchCooperativeKernel" } else { "cuLaunchKernel" };
        let mut st = lock(&self.emu);
        st.usable(call)?;
        let (module, entry) =
            *st.functions.get(&l.function).ok_or_else(|| DriverError::new(call, "CUDA_ERROR_INVALID_HANDLE"))?;
        if entry != l.args.entry() {
            return Err(DriverError::new(call, "CUDA_ERROR_INVALID_VALUE"));
        }
        let table =
            st.modules.get(&module).cloned().ok_or_else(|| DriverError::new(call, "CUDA_ERROR_INVALID_HANDLE"))?;
        if !st.streams.contains_key(&l.stream) {
            return Err(DriverError::new(call, "CUDA_ERROR_INVALID_HANDLE"));
        }
        if l.grid == 0 || l.threads == 0 || l.threads > 1024 {
            return Err(DriverError::new(call, "CUDA_ERROR_INVALID_VALUE"));
        }
        let persistent = matches!(l.args, KernelArgs::Persistent { .. });
        if persistent && !l.cooperative {
            return Err(st.violation(
                call,
                "a persistent grid launched without cuLaunchCooperativeKernel: nothing makes its blocks resident \
                 together, and a block that never runs leaves its slots dead"
                    .into(),
            ));
        }
        if l.cooperative && l.grid > self.capacity() {
            return Err(DriverError::new(call, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
        }
        let pointers: Vec<u64> = match l.args {
            KernelArgs::Init { shared, local } => vec![shared, local],
            KernelArgs::Persistent { shared, local, .. } => vec![shared, local],
            KernelArgs::Clock { cells, .. } => vec![cells],
            KernelArgs::Floor { req, resp, .. } => vec![req, resp],
            KernelArgs::Empty => Vec::new(),
        };
        for p in pointers {
            let pending = match st.region_of(p) {
                None => {
                    return Err(st.violation(call, format!("kernel argument {p:#x} points into no allocation")));
                }
                Some((_, r)) => r.pending_memset,
            };
            if let Some((s, _)) = pending {
                if s != l.stream {
                    return Err(st.violation(
                        call,
                        format!(
                            "a kernel on stream {} uses memory that a memset on stream {s} may still be writing \
                             (not ordered after it)",
                            l.stream
                        ),
                    ));
                }
            }
        }
        let id = st.handle();
        let terminate = match l.args {
            KernelArgs::Persistent { shared, .. } => {
                Some(shared as usize + std::mem::offset_of!(RawGridHeader, terminate))
            }
            _ => None,
        };
        let blocks = l.grid;
        st.kernels.insert(id, Kernel { stream: l.stream, persistent, blocks_left: blocks, error: None, terminate });
        st.streams.get_mut(&l.stream).expect("checked").push(id);
        drop(st);

        let capacity = self.capacity();
        let (args, threads, skew) = (l.args, l.threads, self.clock_skew_ns);
        let nanos = |d: Duration| d.as_nanos().min(u128::from(u32::MAX)) as u32;
        let (latency_ns, read_ns) = (nanos(self.gpu.mapped_latency), nanos(self.gpu.mapped_read_cost));
        let spawn = |name: String, emu: Arc<Emu>, f: Box<dyn FnOnce() + Send>, blocks: u32| {
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    wait_resident(&emu, capacity);
                    f();
                    block_done(&emu, id, blocks);
                })
                .map(|_| ())
                .map_err(|_| DriverError::new(call, "CUDA_ERROR_OUT_OF_MEMORY"))
        };
        match args {
            KernelArgs::Persistent { shared, local, slots_per_block, budget, max_iterations, .. } => {
                for block in 0..blocks {
                    let table = table.clone();
                    let run = Box::new(move || {
                        // SAFETY: the regions are live allocations (frees are refused while this kernel runs) laid
                        // out for the header the backend wrote; the table outlives the call (an Arc held here).
                        unsafe {
                            ffi::rv_emu_persistent_block(
                                shared as *mut u8,
                                local as *mut u8,
                                table.as_ptr(),
                                block,
                                slots_per_block,
                                budget,
                                max_iterations,
                                skew,
                                latency_ns,
                                read_ns,
                            )
                        }
                    });
                    spawn(format!("emu-cuda-block-{block}"), self.emu.clone(), run, 1)?;
                }
                if self.gpu.exec_timeout && max_iterations == 0 {
                    let emu = self.emu.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(EXEC_TIMEOUT);
                        let mut st = lock(&emu);
                        if st.kernels.contains_key(&id) {
                            kill_all(&emu, &mut st, DriverError::new("kernel", "CUDA_ERROR_LAUNCH_TIMEOUT"));
                        }
                    });
                }
            }
            KernelArgs::Init { shared, local } => {
                let run = Box::new(move || {
                    for block in 0..blocks {
                        // SAFETY: as above; the init entry only writes inside the regions.
                        unsafe { ffi::rv_emu_init_block(shared as *mut u8, local as *mut u8, block, blocks, threads) }
                    }
                });
                spawn("emu-cuda-init".into(), self.emu.clone(), run, blocks)?;
            }
            KernelArgs::Clock { cells, rounds } => {
                // SAFETY: `cells` is inside a live allocation (checked above), three 8-byte aligned u64s by the
                // caller, who stops the thread (RV_FLOOR_STOP) before it frees them.
                let run = Box::new(move || unsafe { ffi::rv_emu_clock(cells as *mut u64, rounds, skew, latency_ns) });
                spawn("emu-cuda-clock".into(), self.emu.clone(), run, blocks)?;
            }
            KernelArgs::Floor { req, resp, n } => {
                // SAFETY: both inside live allocations (checked above), 4-byte aligned by the caller; the host
                // stops the thread (RV_FLOOR_STOP) before it frees them.
                let run =
                    Box::new(move || unsafe { ffi::rv_emu_floor(req as *mut u32, resp as *mut u32, n, latency_ns) });
                spawn("emu-cuda-floor".into(), self.emu.clone(), run, blocks)?;
            }
            KernelArgs::Empty => spawn("emu-cuda-empty".into(), self.emu.clone(), Box::new(|| {}), blocks)?,
        }
        Ok(())
    }

    fn stream_done(&self, _ctx: Handle, stream: Handle) -> Result<bool, DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuStreamQuery")?;
        let idle = st
            .streams
            .get(&stream)
            .ok_or_else(|| DriverError::new("cuStreamQuery", "CUDA_ERROR_INVALID_HANDLE"))?
            .is_empty();
        if idle {
            let op = st.ops;
            st.clear_pending(stream, op);
            observed(&self.emu);
        }
        Ok(idle)
    }

    fn create_blocking_event(&self, _ctx: Handle) -> Result<Handle, DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuEventCreate")?;
        let h = st.handle();
        st.events.insert(h, None);
        Ok(h)
    }

    fn record_event(&self, _ctx: Handle, event: Handle, stream: Handle) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuEventRecord")?;
        let last = st
            .streams
            .get(&stream)
            .ok_or_else(|| DriverError::new("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE"))?
            .last()
            .copied();
        let op = st.ops;
        let slot =
            st.events.get_mut(&event).ok_or_else(|| DriverError::new("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE"))?;
        *slot = Some((stream, op, last));
        Ok(())
    }

    fn wait_event(&self, _ctx: Handle, event: Handle) -> Result<(), DriverError> {
        const CALL: &str = "cuEventSynchronize";
        let mut st = lock(&self.emu);
        let recorded = *st.events.get(&event).ok_or_else(|| DriverError::new(CALL, "CUDA_ERROR_INVALID_HANDLE"))?;
        let Some((stream, op, kernel)) = recorded else { return Ok(()) };
        if let Some(k) = kernel {
            if st.kernels.contains_key(&k) {
                self.emu.blocking_waits.fetch_add(1, Ordering::Relaxed);
            }
            while st.kernels.contains_key(&k) {
                st = self.emu.changed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            observed(&self.emu);
            if let Some(Some(e)) = st.finished.get(&k) {
                return Err(DriverError { call: CALL, ..e.clone() });
            }
        }
        st.usable(CALL)?;
        st.clear_pending(stream, op);
        Ok(())
    }

    fn destroy_event(&self, _ctx: Handle, event: Handle) -> Result<(), DriverError> {
        let mut st = lock(&self.emu);
        st.usable("cuEventDestroy")?;
        st.events
            .remove(&event)
            .map(|_| ())
            .ok_or_else(|| DriverError::new("cuEventDestroy", "CUDA_ERROR_INVALID_HANDLE"))
    }
}
