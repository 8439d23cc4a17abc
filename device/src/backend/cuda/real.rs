//! [`Driver`] on the real CUDA driver (`libcuda.so`, loaded by cudarc at first use).

use super::driver::{DevPtr, Driver, DriverError, GpuInfo, Handle, KernelArgs, Launch, ModuleImage};
use crate::ffi::BehaviourFn;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};

/// The real driver.
pub struct CudarcDriver;

fn code(e: result::DriverError) -> String {
    format!("{:?}", e.0)
}

fn check(call: &'static str, rc: sys::CUresult) -> Result<(), DriverError> {
    rc.result().map_err(|e| DriverError::new(call, code(e)))
}

fn wrap<T>(call: &'static str, r: Result<T, result::DriverError>) -> Result<T, DriverError> {
    r.map_err(|e| DriverError::new(call, code(e)))
}

fn current(ctx: Handle) -> Result<(), DriverError> {
    // SAFETY: `ctx` is a context this process retained and has not released.
    wrap("cuCtxSetCurrent", unsafe { result::ctx::set_current(ctx as sys::CUcontext) })
}

fn device(ordinal: i32) -> Result<sys::CUdevice, DriverError> {
    wrap("cuInit", result::init())?;
    wrap("cuDeviceGet", result::device::get(ordinal))
}

/// True if the CUDA driver library can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the library.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

impl Driver for CudarcDriver {
    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn gpu_key(&self, ordinal: i32) -> u64 {
        ordinal as u64
    }

    fn gpu(&self, ordinal: i32) -> Result<GpuInfo, DriverError> {
        let dev = device(ordinal)?;
        let attr = |a| {
            // SAFETY: `dev` is a valid device.
            wrap("cuDeviceGetAttribute", unsafe { result::device::get_attribute(dev, a) })
        };
        use sys::CUdevice_attribute as A;
        Ok(GpuInfo {
            name: result::device::get_name(dev).unwrap_or_else(|_| "unknown".into()),
            arch: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
            ),
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            exec_timeout: attr(A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT)? != 0,
            cooperative: attr(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
        })
    }

    fn retain_context(&self, ordinal: i32) -> Result<Handle, DriverError> {
        let dev = device(ordinal)?;
        // SAFETY: `dev` is a valid device.
        let ctx = wrap("cuDevicePrimaryCtxRetain", unsafe { result::primary_ctx::retain(dev) })?;
        Ok(ctx as Handle)
    }

    fn release_context(&self, ordinal: i32) -> Result<(), DriverError> {
        let dev = device(ordinal)?;
        // SAFETY: releases one retention taken by `retain_context`.
        check("cuDevicePrimaryCtxRelease", unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) })
    }

    fn reset_context(&self, ordinal: i32) -> Result<(), DriverError> {
        let dev = device(ordinal)?;
        // SAFETY: destroys every allocation and module of the primary context; the caller holds none it will
        // use again (the context had a sticky error: they are unusable anyway, and no kernel runs).
        check("cuDevicePrimaryCtxReset", unsafe { sys::cuDevicePrimaryCtxReset_v2(dev) })
    }

    fn load_module(
        &self,
        ctx: Handle,
        image: &ModuleImage,
        _host_table: &[Option<BehaviourFn>],
    ) -> Result<Handle, DriverError> {
        current(ctx)?;
        let bytes: Vec<u8> = match image {
            ModuleImage::Cubin { bytes, .. } => bytes.clone(),
            ModuleImage::Ptx { text } => {
                let mut t = text.clone();
                if t.last() != Some(&0) {
                    t.push(0);
                }
                t
            }
            ModuleImage::HostOnly => return Err(DriverError::new("cuModuleLoadDataEx", "CUDA_ERROR_INVALID_IMAGE")),
        };
        const LOG: usize = 16 * 1024;
        let mut log = vec![0u8; LOG];
        let mut options =
            [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr() as *mut c_void, LOG as *mut c_void];
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `bytes` is a CUBIN or NUL-terminated PTX image; the log buffer has the size passed with it and
        // outlives the call.
        let rc = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                bytes.as_ptr() as *const c_void,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        match rc.result() {
            Ok(()) => Ok(module as Handle),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
                Err(DriverError {
                    call: "cuModuleLoadDataEx",
                    code: code(e),
                    log: Some(if text.is_empty() { "(empty)".into() } else { text }),
                })
            }
        }
    }

    fn function(&self, ctx: Handle, module: Handle, name: &str) -> Result<Handle, DriverError> {
        current(ctx)?;
        let c = CString::new(name).map_err(|_| DriverError::new("cuModuleGetFunction", "name contains NUL"))?;
        // SAFETY: `module` is loaded; the name is NUL-terminated.
        let f = wrap("cuModuleGetFunction", unsafe { result::module::get_function(module as sys::CUmodule, c) })?;
        Ok(f as Handle)
    }

    fn unload_module(&self, ctx: Handle, module: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: `module` was loaded by `load_module` and is unloaded once.
        wrap("cuModuleUnload", unsafe { result::module::unload(module as sys::CUmodule) })
    }

    fn blocks_per_sm(&self, ctx: Handle, function: Handle, threads: u32) -> Result<u32, DriverError> {
        current(ctx)?;
        // SAFETY: `function` belongs to a loaded module.
        let n = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(function as sys::CUfunction, threads as i32, 0)
        };
        Ok(wrap("cuOccupancyMaxActiveBlocksPerMultiprocessor", n)?.max(0) as u32)
    }

    fn alloc_mapped(&self, ctx: Handle, bytes: usize) -> Result<(*mut u8, DevPtr), DriverError> {
        current(ctx)?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain allocation.
        let host = wrap("cuMemHostAlloc", unsafe { result::malloc_host(bytes, flags) })? as *mut u8;
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current context.
        if let Err(e) = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut c_void, 0)
        }) {
            // SAFETY: freed once; nothing uses it yet.
            let _ = unsafe { result::free_host(host as *mut c_void) };
            return Err(e);
        }
        Ok((host, dev))
    }

    fn free_mapped(&self, ctx: Handle, host: *mut u8) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: allocated by `alloc_mapped`, freed once, with no kernel using it.
        wrap("cuMemFreeHost", unsafe { result::free_host(host as *mut c_void) })
    }

    fn alloc_device(&self, ctx: Handle, bytes: usize) -> Result<DevPtr, DriverError> {
        current(ctx)?;
        // SAFETY: a plain allocation.
        wrap("cuMemAlloc", unsafe { result::malloc_sync(bytes) })
    }

    fn free_device(&self, ctx: Handle, ptr: DevPtr) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: allocated by `alloc_device`, freed once, with no kernel using it.
        wrap("cuMemFree", unsafe { result::free_sync(ptr) })
    }

    fn create_stream(&self, ctx: Handle) -> Result<Handle, DriverError> {
        current(ctx)?;
        let s = wrap("cuStreamCreate", result::stream::create(result::stream::StreamKind::NonBlocking))?;
        Ok(s as Handle)
    }

    fn destroy_stream(&self, ctx: Handle, stream: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: created by `create_stream`, destroyed once.
        wrap("cuStreamDestroy", unsafe { result::stream::destroy(stream as sys::CUstream) })
    }

    fn memset_zero_async(&self, ctx: Handle, ptr: DevPtr, bytes: usize, stream: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: `ptr` has at least `bytes` bytes; the memset is ordered on `stream`.
        check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(ptr, 0, bytes, stream as sys::CUstream) })
    }

    fn launch(&self, ctx: Handle, l: &Launch) -> Result<(), DriverError> {
        current(ctx)?;
        // The parameter values live in this frame until the launch call returns (the driver copies them); the
        // first `count` are the entry point's parameters, in order.
        let (a, b, c, d, e, f, count): (u64, u64, u32, u32, u64, u32, usize) = match l.args {
            KernelArgs::Init { shared, local } => (shared, local, 0, 0, 0, 0, 2),
            KernelArgs::Persistent { shared, local, slots_per_block, budget, max_iterations, actor_backoff_ns } => {
                (shared, local, slots_per_block, budget, max_iterations, actor_backoff_ns, 6)
            }
            KernelArgs::Clock { cells, rounds } => (cells, rounds, 0, 0, 0, 0, 2),
            // (the floor's n goes third: a u32 after two pointers)
            KernelArgs::Floor { req, resp, n } => (req, resp, n, 0, 0, 0, 3),
            KernelArgs::Empty => (0, 0, 0, 0, 0, 0, 0),
        };
        let (mut a, mut b, mut c, mut d, mut e, mut f) = (a, b, c, d, e, f);
        let mut all: [*mut c_void; 6] = [
            &mut a as *mut _ as *mut c_void,
            &mut b as *mut _ as *mut c_void,
            &mut c as *mut _ as *mut c_void,
            &mut d as *mut _ as *mut c_void,
            &mut e as *mut _ as *mut c_void,
            &mut f as *mut _ as *mut c_void,
        ];
        let params = &mut all[..count];
        let function = l.function as sys::CUfunction;
        let stream = l.stream as sys::CUstream;
        // SAFETY: the parameters match the entry point's signature (KernelArgs names it) and point to locals
        // alive during the call; the memory they point to outlives the kernel (the executor frees it only
        // after the kernel has left).
        let r = unsafe {
            if l.cooperative {
                result::launch_cooperative_kernel(function, (l.grid, 1, 1), (l.threads, 1, 1), 0, stream, params)
            } else {
                result::launch_kernel(function, (l.grid, 1, 1), (l.threads, 1, 1), 0, stream, params)
            }
        };
        wrap(if l.cooperative { "cuLaunchCooperativeKernel" } else { "cuLaunchKernel" }, r)
    }

    fn stream_done(&self, ctx: Handle, stream: Handle) -> Result<bool, DriverError> {
        current(ctx)?;
        // SAFETY: `stream` is live.
        match unsafe { sys::cuStreamQuery(stream as sys::CUstream) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => check("cuStreamQuery", rc).map(|_| false),
        }
    }

    fn create_blocking_event(&self, ctx: Handle) -> Result<Handle, DriverError> {
        current(ctx)?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags =
            sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32 | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: writes one handle.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
        Ok(event as Handle)
    }

    fn record_event(&self, ctx: Handle, event: Handle, stream: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: both are live.
        wrap("cuEventRecord", unsafe { result::event::record(event as sys::CUevent, stream as sys::CUstream) })
    }

    fn wait_event(&self, ctx: Handle, event: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: `event` is live.
        wrap("cuEventSynchronize", unsafe { result::event::synchronize(event as sys::CUevent) })
    }

    fn destroy_event(&self, ctx: Handle, event: Handle) -> Result<(), DriverError> {
        current(ctx)?;
        // SAFETY: created by `create_blocking_event`, destroyed once.
        wrap("cuEventDestroy", unsafe { result::event::destroy(event as sys::CUevent) })
    }
}
