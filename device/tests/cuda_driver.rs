//! The CUDA backend's host code against the emulated driver: each defect a real GPU would have shown (a hang,
//! a poisoned context, an unordered memset, a grid that cannot be resident, a spinning launcher, a module that
//! does not load, a clock with another epoch) has a test here that fails without its fix. The emulated driver
//! refuses what the real one would hang or corrupt on, and logs it (`violations`).

mod common;
use common::*;
use ringvisor_device::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn open_on(
    driver: &EmulatedDriver,
    slots: u32,
    tweak: impl FnOnce(CudaConfig) -> CudaConfig,
) -> Result<Device, DeviceError> {
    let cuda = tweak(CudaConfig { driver: CudaDriver::Emulated(driver.clone()), ..CudaConfig::default() });
    Device::open(DeviceConfig::default().slots(slots).backend(Backend::Cuda(cuda)))
}

fn counter_works(d: &Device, slot: u32) {
    d.create(slot, "counter", &1i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    assert_eq!(i64_of(&d.call(slot, &2i64.to_le_bytes(), T).unwrap()), 3);
}

fn all_released(driver: &EmulatedDriver) {
    eventually("every device released", || driver.retained() == 0);
    assert_eq!(driver.violations(), Vec::<String>::new());
    assert_eq!((driver.resources(), driver.leaked()), (0, 0));
}

/// Defect 1: a device released while another device's persistent kernel runs in the same context (the order of
/// a device restart) must not free under it: cuMemFree would wait for that kernel forever.
#[test]
fn a_device_released_under_another_devices_kernel_defers_its_frees() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    let old = open_on(&gpu, 2, |c| c).unwrap();
    counter_works(&old, 0);
    let new = open_on(&gpu, 2, |c| c).unwrap(); // the restarted device opens first
    let held = gpu.resources();
    drop(old);
    eventually("the old kernel to leave", || gpu.running_kernels() == 1);
    assert_eq!(gpu.violations(), Vec::<String>::new(), "nothing freed under the new kernel");
    assert_eq!(gpu.resources(), held, "the old device's memory waits for the new kernel to leave");
    counter_works(&new, 1);
    drop(new);
    all_released(&gpu);
}

/// Defect 2: a fault in a kernel is a lost device within a poll, with the driver's error as the cause; the
/// poisoned context is reset before the next open, which works.
#[test]
fn a_kernel_fault_is_a_lost_device_with_the_drivers_error_and_a_reopen_works() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    // the heartbeat bound is an hour: only the executor's own report can declare this device lost
    let cuda = CudaConfig { driver: CudaDriver::Emulated(gpu.clone()), ..CudaConfig::default() };
    let config = DeviceConfig::default().slots(2).lost_after(Some(Duration::from_secs(3600)));
    let d = Device::open(config.backend(Backend::Cuda(cuda))).unwrap();
    counter_works(&d, 0);
    gpu.inject_kernel_fault("CUDA_ERROR_ILLEGAL_ADDRESS");
    eventually("the device to be lost", || d.health() == DeviceHealth::Lost);
    let cause = d.loss_cause().expect("a cause");
    assert!(cause.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{cause}");
    assert!(matches!(d.call(0, &1i64.to_le_bytes(), T), Err(DeviceError::DeviceLost)));
    let again = open_on(&gpu, 2, |c| c).expect("the reopen resets the context");
    assert_eq!(gpu.resets(), 1);
    counter_works(&again, 0);
    drop((d, again));
    all_released(&gpu);
}

/// Defect 2 (RAII): every failure inside start gives back what was taken before it.
#[test]
fn a_start_that_fails_gives_back_everything_it_took() {
    // one multiprocessor of two blocks: one stays free as headroom, so no grid of block 0 + an actor block fits
    let gpu = EmulatedDriver::new(EmulatedGpu { sms: 1, blocks_per_sm: 2, ..EmulatedGpu::default() });
    let err = open_on(&gpu, 4, |c| c).unwrap_err();
    assert!(err.to_string().contains("no room for another persistent kernel"), "{err}");
    all_released(&gpu);
}

/// Defect 4: grids leave headroom and fit next to this process's other kernels; a grid whose blocks cannot all
/// become resident (another process fills the GPU) fails the start instead of leaving slots dead.
#[test]
fn grids_fit_what_stays_resident_and_a_block_that_never_runs_fails_the_start() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default()); // 8 resident blocks, 1 kept free
    let a = open_on(&gpu, 2, |c| c).unwrap();
    assert!(a.describe().contains("3 blocks of 8 resident"), "{}", a.describe());
    let b = open_on(&gpu, 1024, |c| c).unwrap();
    assert!(b.describe().contains("4 blocks of 8 resident"), "{}", b.describe());
    counter_works(&b, 1023);
    let err = open_on(&gpu, 2, |c| c).unwrap_err();
    assert!(err.to_string().contains("no room"), "{err}");
    drop((a, b));
    all_released(&gpu);

    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    gpu.occupy(6); // another process's kernels: 2 blocks left, not enough for a grid of 3
    let err = open_on(&gpu, 2, |c| CudaConfig { start_timeout: Duration::from_millis(300), ..c }).unwrap_err();
    assert!(err.to_string().contains("every block entering the persistent kernel"), "{err}");
    gpu.occupy(0);
    all_released(&gpu);
}

/// Defect 5: the launcher sleeps on a blocking-sync event while the kernel runs.
#[test]
fn the_launcher_sleeps_on_a_blocking_sync_event() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    let d = open_on(&gpu, 2, |c| c).unwrap();
    counter_works(&d, 0);
    eventually("the launcher to wait", || gpu.blocking_waits() == 1);
    drop(d);
    all_released(&gpu);
}

/// A GPU whose driver kills long kernels (a display GPU) runs the kernel event-driven: the device outlives
/// the watchdog.
#[test]
fn a_gpu_with_an_execution_timeout_runs_event_driven_and_outlives_the_watchdog() {
    let gpu = EmulatedDriver::new(EmulatedGpu { exec_timeout: true, ..EmulatedGpu::default() });
    let d = open_on(&gpu, 2, |c| c).unwrap();
    assert!(d.describe().contains("EventDriven"), "{}", d.describe());
    counter_works(&d, 0);
    std::thread::sleep(EMULATED_EXEC_TIMEOUT + Duration::from_millis(500));
    assert_eq!(i64_of(&d.call(0, &4i64.to_le_bytes(), T).unwrap()), 7);
    assert_ne!(d.health(), DeviceHealth::Lost);
    drop(d);
    all_released(&gpu);
}

/// Defect 11: event times are host time although the device clock has an epoch of its own.
#[test]
fn event_times_are_host_time() {
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    let d = open_on(&gpu, 2, |c| c).unwrap();
    let e = d.create(0, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
    let skew = Duration::from_nanos((now - e.event.time_ns as i64).unsigned_abs());
    assert!(skew < Duration::from_secs(60), "event time {} is {skew:?} from host time {now}", e.event.time_ns);
    drop(d);
    all_released(&gpu);
}

/// Defect 9: CUBIN for the GPU's architecture first; PTX for a GPU NVRTC does not target, and when the driver's
/// JIT refuses it, the JIT log is in the error (and the start gives everything back).
#[test]
fn cubin_first_then_ptx_with_the_jit_log_in_the_error() {
    if !nvrtc_or_skip() {
        return;
    }
    let gpu = EmulatedDriver::new(EmulatedGpu::default());
    let d = open_on(&gpu, 2, |c| c).unwrap();
    assert!(d.describe().contains("CUBIN sm_80"), "{}", d.describe());
    drop(d);
    all_released(&gpu);

    // sm_200: no NVRTC targets it, so the newest PTX it makes is JIT-compiled, by a driver too old for it
    let future = EmulatedGpu { arch: (20, 0), max_ptx_version: (6, 0), ..EmulatedGpu::default() };
    let gpu = EmulatedDriver::new(future.clone());
    let err = open_on(&gpu, 2, |c| c).unwrap_err().to_string();
    assert!(err.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION") && err.contains("JIT log"), "{err}");
    assert!(err.contains("Unsupported .version"), "{err}");
    all_released(&gpu);

    let gpu = EmulatedDriver::new(EmulatedGpu { max_ptx_version: (99, 0), ..future });
    let d = open_on(&gpu, 2, |c| c).unwrap();
    assert!(d.describe().contains("PTX compute_"), "{}", d.describe());
    counter_works(&d, 0);
    drop(d);
    all_released(&gpu);
}
