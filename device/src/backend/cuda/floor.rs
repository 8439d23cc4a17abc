//! The floor of a host round trip on this GPU, measured in the same run as what it is compared with: one GPU
//! thread answering a sequence number the host stores into pinned mapped memory (what the rings use), with the
//! protocol's own system-scope loads and stores (`rv_floor_thread` in `kernels/rv_entry.cu`), and the cost of a
//! kernel launch plus a stream synchronisation per request (what a framework without a persistent kernel pays).
//! No `Device` round trip can beat the first; the second is what a persistent kernel exists to beat.
//!
//! Runs on the real driver and on the emulated one (whose floor is its cost model of mapped memory).

use super::driver::{KernelArgs, Launch};
use super::{book, driver_err, image, quiesce::PAUSE_WAIT, source, CudaConfig};
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::RV_FLOOR_STOP;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for one answer before the probe gives up (a GPU that does not answer).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// What [`measure`] found, in nanoseconds per round trip.
#[derive(Clone, Debug)]
pub struct FloorReport {
    /// The GPU, in words.
    pub gpu: String,
    /// Host store -> GPU thread sees it -> GPU store -> host sees it, one sample per round trip.
    pub ping_pong_ns: Vec<u64>,
    /// An empty kernel launched and waited for (the stream polled), one sample per request.
    pub launch_ns: Vec<u64>,
}

/// Measures `samples` ping-pong round trips and `samples / 4` launches on the GPU `config` names (its
/// ordinal and driver). Fails with a clear error without a driver, or if the GPU does not answer.
pub fn measure(config: &CudaConfig, samples: usize) -> Result<FloorReport, DeviceError> {
    let driver = config.driver.open()?;
    let d = driver.as_ref();
    let ordinal = config.ordinal;
    let gpu = d.gpu(ordinal).map_err(driver_err)?;
    let key = d.gpu_key(ordinal);
    book::prepare_context(d, ordinal, key).map_err(driver_err)?;
    let ctx = d.retain_context(ordinal).map_err(driver_err)?;
    let kernels = book::kernels(key);
    let quiesced = |what: &str, f: &mut dyn FnMut() -> Result<(), DeviceError>| {
        kernels.quiesced(PAUSE_WAIT, f).map_err(|e| DeviceError::BackendUnavailable(format!("cuda {what}: {e}")))?
    };
    // Module, memory and stream while other devices' kernels are paused (they wait for running kernels).
    let behaviours = BehaviourSet::builtins();
    let mut made = None;
    let setup = quiesced("floor setup", &mut || {
        let program = source::program(&behaviours)?;
        let (module, _) = image::load(d, ctx, &program, gpu.arch, &behaviours.host_table())?;
        let function = |name| d.function(ctx, module, name).map_err(driver_err);
        let (floor_fn, empty_fn) = (function("rv_floor_kernel")?, function("rv_empty_kernel")?);
        let (host, dev) = d.alloc_mapped(ctx, 4096).map_err(driver_err)?;
        let stream = d.create_stream(ctx).map_err(driver_err)?;
        made = Some((module, floor_fn, empty_fn, host, dev, stream));
        Ok(())
    });
    let result = setup.and_then(|_| {
        let (_, floor_fn, empty_fn, host, dev, stream) = made.expect("set up");
        // SAFETY: two words at the start of a live 4 KiB mapped allocation, accessed only atomically by the host
        // (and by the one kernel thread); zeroed before the kernel starts.
        let (req, resp) =
            unsafe { (AtomicU32::from_ptr(host as *mut u32), AtomicU32::from_ptr((host as *mut u32).add(16))) };
        req.store(0, Ordering::Release);
        resp.store(0, Ordering::Release);
        let n = samples.max(1) as u32;
        let launch = |function, args| Launch { function, grid: 1, threads: 32, args, stream, cooperative: false };
        d.launch(ctx, &launch(floor_fn, KernelArgs::Floor { req: dev, resp: dev + 64, n })).map_err(driver_err)?;
        let mut ping_pong_ns = Vec::with_capacity(n as usize);
        let mut answered = true;
        for i in 1..=n {
            let t0 = Instant::now();
            req.store(i, Ordering::Release);
            while resp.load(Ordering::Acquire) != i {
                if t0.elapsed() > ANSWER_WAIT {
                    answered = false;
                    break;
                }
                std::hint::spin_loop();
            }
            if !answered {
                req.store(RV_FLOOR_STOP, Ordering::Release);
                break;
            }
            ping_pong_ns.push(t0.elapsed().as_nanos() as u64);
        }
        let done = Instant::now() + ANSWER_WAIT;
        while !d.stream_done(ctx, stream).map_err(driver_err)? {
            if Instant::now() > done {
                return Err(DeviceError::BackendUnavailable("cuda floor: the probe kernel did not end".into()));
            }
        }
        if !answered {
            return Err(DeviceError::BackendUnavailable(format!(
                "cuda floor: no answer within {ANSWER_WAIT:?} after {} round trips",
                ping_pong_ns.len()
            )));
        }
        let mut launch_ns = Vec::with_capacity(n as usize / 4);
        for i in 0..(n / 4).max(1) + 20 {
            let t0 = Instant::now();
            d.launch(ctx, &launch(empty_fn, KernelArgs::Empty)).map_err(driver_err)?;
            while !d.stream_done(ctx, stream).map_err(driver_err)? {
                std::hint::spin_loop();
            }
            if i >= 20 {
                launch_ns.push(t0.elapsed().as_nanos() as u64); // the first 20 warm up
            }
        }
        Ok(FloorReport {
            gpu: format!("{} {} (sm_{}{})", d.kind(), gpu.name, gpu.arch.0, gpu.arch.1),
            ping_pong_ns,
            launch_ns,
        })
    });
    if let Some((module, _, _, host, _, stream)) = made {
        let freed = quiesced("floor release", &mut || {
            d.destroy_stream(ctx, stream).map_err(driver_err)?;
            d.unload_module(ctx, module).map_err(driver_err)?;
            d.free_mapped(ctx, host).map_err(driver_err)
        });
        if let Err(e) = freed {
            tracing::warn!(error = %e, "cuda floor: release failed");
        }
    }
    let _ = d.release_context(ordinal);
    result
}
