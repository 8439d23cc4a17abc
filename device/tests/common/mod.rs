//! Helpers shared by the device integration tests.
#![allow(dead_code)]

use ringvisor_device::*;
use std::cell::RefCell;
use std::time::{Duration, Instant};

pub const T: Duration = Duration::from_secs(10);

/// The backends every device test runs on: the CPU backend and the CUDA backend over the emulated driver
/// (always), and the real CUDA driver when `RINGVISOR_BACKEND` names it (`cuda` or `cuda-event`, on a GPU
/// machine: `scripts/gpu-suite.sh`).
#[derive(Clone, Copy, Debug)]
pub enum Which {
    Cpu,
    CudaEmulated,
    Gpu,
    Wgpu,
}

/// True if a Vulkan adapter is there for the wgpu backend; otherwise the calling test says it skipped, or fails
/// when `RINGVISOR_REQUIRE_WGPU=1` (set by `.ci/run`, which installs Mesa's lavapipe).
pub fn wgpu_or_skip() -> bool {
    if !wgpu_adapters().is_empty() {
        return true;
    }
    let required = std::env::var("RINGVISOR_REQUIRE_WGPU").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "RINGVISOR_REQUIRE_WGPU=1 but wgpu finds no Vulkan adapter (apt-get install mesa-vulkan-drivers)"
    );
    eprintln!("SKIPPED: no Vulkan adapter for the wgpu backend; set RINGVISOR_REQUIRE_WGPU=1 to make this a failure");
    false
}

/// The Vulkan adapters wgpu finds (looked up once per test process).
pub fn wgpu_adapters() -> &'static [String] {
    static ADAPTERS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    #[cfg(feature = "wgpu")]
    return ADAPTERS.get_or_init(ringvisor_device::wgpu_adapters);
    #[cfg(not(feature = "wgpu"))]
    return ADAPTERS.get_or_init(Vec::new);
}

#[cfg(feature = "wgpu")]
fn wgpu_backend() -> Backend {
    Backend::Wgpu(WgpuConfig::default())
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_backend() -> Backend {
    unreachable!("run_on skips the wgpu backend when the feature is off")
}

/// True when the running test runs on the wgpu backend: a test that cannot apply there returns early, saying
/// why.
pub fn skip_on_wgpu(why: &str) -> bool {
    skip_on_wgpu_if(true, why)
}

/// True when the running test runs on the wgpu backend.
#[allow(dead_code)]
pub fn on_wgpu() -> bool {
    CURRENT.with(|c| matches!(*c.borrow(), Some(Which::Wgpu)))
}

/// Like [`skip_on_wgpu`], when `cond` holds.
#[allow(dead_code)]
pub fn skip_on_wgpu_if(cond: bool, why: &str) -> bool {
    let on = cond && on_wgpu();
    if on {
        eprintln!("SKIPPED on wgpu: {why}");
    }
    on
}

/// The real CUDA backend `RINGVISOR_BACKEND` names, if it names one.
pub fn gpu_backend() -> Option<Backend> {
    match Backend::from_env() {
        Ok(b @ Backend::Cuda(CudaConfig { driver: CudaDriver::Real, .. })) => Some(b),
        _ => None,
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Which>> = const { RefCell::new(None) };
    static EMULATED: RefCell<Vec<EmulatedDriver>> = const { RefCell::new(Vec::new()) };
}

/// The backend of the running test (set by `on_every_backend!`; the environment's default otherwise). On the
/// emulated backend every device of a test opens on one emulated GPU, as on a machine with one GPU (a second
/// device's module load, allocations and frees then meet the first device's running kernel, as on the real
/// driver), checked when the test ends.
pub fn backend() -> Backend {
    match CURRENT.with(|c| *c.borrow()) {
        None => Backend::default(),
        Some(Which::Cpu) => Backend::Cpu(CpuConfig::default()),
        Some(Which::Gpu) => gpu_backend().expect("checked by run_on"),
        Some(Which::Wgpu) => wgpu_backend(),
        Some(Which::CudaEmulated) => {
            let driver = EMULATED.with(|e| {
                let mut drivers = e.borrow_mut();
                if drivers.is_empty() {
                    drivers.push(EmulatedDriver::new(EmulatedGpu::default()));
                }
                drivers[0].clone()
            });
            Backend::Cuda(CudaConfig { driver: CudaDriver::Emulated(driver), ..CudaConfig::default() })
        }
    }
}

/// Runs `test` on `which`. On the emulated driver, also checks what a real driver would have punished: no
/// rule broken (a free under a running kernel, an unordered memset, ...), and once the test's devices are
/// dropped, every allocation freed and every context retention released.
pub fn run_on(which: Which, test: fn()) {
    if matches!(which, Which::Gpu) && gpu_backend().is_none() {
        eprintln!("SKIPPED: RINGVISOR_BACKEND does not name a CUDA backend (`cuda`, `cuda-event`): no GPU run");
        return;
    }
    if matches!(which, Which::Wgpu) && !wgpu_or_skip() {
        return;
    }
    CURRENT.with(|c| *c.borrow_mut() = Some(which));
    test();
    for driver in EMULATED.with(|e| std::mem::take(&mut *e.borrow_mut())) {
        eventually("the emulated driver to see every device released", || driver.retained() == 0);
        assert_eq!(driver.violations(), Vec::<String>::new(), "CUDA rules broken");
        assert_eq!((driver.leaked(), driver.resources()), (0, 0), "resources never freed");
    }
}

/// Turns the listed test functions into one test per backend: `cpu::name`, `cuda_emulated::name`, `wgpu::name`
/// (the WebGPU backend; skipped without a Vulkan adapter unless `RINGVISOR_REQUIRE_WGPU=1`), and `gpu::name`
/// (skipped unless `RINGVISOR_BACKEND` names the real CUDA backend).
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $( #[test] fn $name() { $crate::common::run_on($crate::common::Which::Cpu, super::$name) } )*
        }
        mod cuda_emulated {
            $( #[test] fn $name() { $crate::common::run_on($crate::common::Which::CudaEmulated, super::$name) } )*
        }
        mod wgpu {
            $( #[test] fn $name() { $crate::common::run_on($crate::common::Which::Wgpu, super::$name) } )*
        }
        mod gpu {
            $( #[test] fn $name() { $crate::common::run_on($crate::common::Which::Gpu, super::$name) } )*
        }
    };
}

pub fn open(slots: u32) -> Device {
    Device::open(DeviceConfig::default().slots(slots).backend(backend())).expect("device opens")
}

/// Opens `config` on the running test's backend.
pub fn open_with(config: DeviceConfig) -> Device {
    Device::open(config.backend(backend())).expect("device opens")
}

pub fn i64_of(reply: &Reply) -> i64 {
    i64::from_le_bytes(reply.payload().expect("a reply, not an error")[..8].try_into().unwrap())
}

/// test-behaviour message: op + u32 argument + u64 argument.
pub fn test_msg(op: u32, arg: u32, wide: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&op.to_le_bytes());
    v.extend_from_slice(&arg.to_le_bytes());
    v.extend_from_slice(&wide.to_le_bytes());
    v
}

pub const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Waits until `f` holds, or panics after `T`.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next event of `stream` whose kind is `kind`.
pub fn next_event(stream: &Stream<SlotEvent>, kind: EventKind) -> SlotEvent {
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = stream.recv_timeout(left).unwrap_or_else(|| panic!("no {kind:?} event"));
        if e.event.kind == kind {
            return e;
        }
    }
}

/// True if the NVRTC library loads; otherwise the calling test says it skipped, or fails when
/// `RINGVISOR_REQUIRE_NVRTC=1` (set by `.ci/run`).
pub fn nvrtc_or_skip() -> bool {
    if nvrtc::available() {
        return true;
    }
    let required = std::env::var("RINGVISOR_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    assert!(!required, "RINGVISOR_REQUIRE_NVRTC=1 but libnvrtc.so cannot be loaded (see README: NVRTC)");
    eprintln!("SKIPPED: libnvrtc.so not found; set RINGVISOR_REQUIRE_NVRTC=1 to make this a failure");
    false
}
