//! The device program as the driver loads it: CUBIN for the GPU's own architecture first (no JIT, no
//! dependence on the driver's PTX version), then PTX for the newest architecture NVRTC knows that the GPU runs
//! (JIT-compiled by the driver; its log goes into the error). Compiled images are cached per process, so a
//! device restart does not compile again.

use super::driver::{Driver, Handle, ModuleImage};
use super::nvrtc;
use crate::error::DeviceError;
use crate::ffi::BehaviourFn;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

type CacheKey = (u64, u32, bool);

static CACHE: Mutex<Option<HashMap<CacheKey, Arc<Vec<u8>>>>> = Mutex::new(None);

fn compiled(program: &str, arch: u32, output: nvrtc::Output) -> Result<Arc<Vec<u8>>, DeviceError> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    program.hash(&mut h);
    let key = (h.finish(), arch, output == nvrtc::Output::Cubin);
    if let Some(image) = crate::sync::lock(&CACHE).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(image.clone());
    }
    let image = Arc::new(nvrtc::compile(program, "ringvisor.cu", arch / 10, arch % 10, output)?);
    crate::sync::lock(&CACHE).get_or_insert_with(HashMap::new).insert(key, image.clone());
    Ok(image)
}

/// Loads `program` for a GPU of compute capability `arch`: CUBIN if NVRTC targets the architecture, else (or
/// if the CUBIN does not load) PTX. Without NVRTC only a driver that runs the host build loads anything.
/// Returns the module and what was loaded (`CUBIN sm_80`, `PTX compute_80`, `host build`).
pub(crate) fn load(
    driver: &dyn Driver,
    ctx: Handle,
    program: &str,
    arch: (u32, u32),
    host_table: &[Option<BehaviourFn>],
) -> Result<(Handle, String), DeviceError> {
    let target = arch.0 * 10 + arch.1;
    if target < 70 {
        return Err(DeviceError::BackendUnavailable(format!(
            "compute capability {}.{} is below 7.0 (the protocol needs __nanosleep and acquire/release PTX)",
            arch.0, arch.1
        )));
    }
    if !nvrtc::available() {
        if driver.needs_image() {
            return Err(DeviceError::BackendUnavailable(
                "the NVRTC library (libnvrtc.so) was not found; install it and put it on LD_LIBRARY_PATH".into(),
            ));
        }
        return driver
            .load_module(ctx, &ModuleImage::HostOnly, host_table)
            .map(|m| (m, "host build".to_string()))
            .map_err(|e| DeviceError::BackendUnavailable(format!("cannot load the device program: {e}")));
    }
    let supported = nvrtc::supported_archs()?;
    let mut failures = Vec::new();
    if supported.contains(&target) {
        let bytes = compiled(program, target, nvrtc::Output::Cubin)?;
        let image = ModuleImage::Cubin { arch, bytes: bytes.to_vec() };
        match driver.load_module(ctx, &image, host_table) {
            Ok(module) => return Ok((module, format!("CUBIN sm_{target}"))),
            Err(e) => failures.push(format!("CUBIN sm_{target}: {e}")),
        }
    } else {
        failures.push(format!("CUBIN sm_{target}: this NVRTC does not target it (it targets {supported:?})"));
    }
    match supported.iter().copied().filter(|&a| a <= target).max() {
        Some(ptx_arch) => {
            let text = compiled(program, ptx_arch, nvrtc::Output::Ptx)?;
            match driver.load_module(ctx, &ModuleImage::Ptx { text: text.to_vec() }, host_table) {
                Ok(module) => {
                    tracing::warn!(reasons = %failures.join("; "), "device program loaded as PTX (JIT) for compute_{ptx_arch}");
                    return Ok((module, format!("PTX compute_{ptx_arch}")));
                }
                Err(e) => failures.push(format!("PTX compute_{ptx_arch}: {e}")),
            }
        }
        None => failures.push(format!("PTX: NVRTC targets no architecture at or below sm_{target}")),
    }
    Err(DeviceError::BackendUnavailable(format!("cannot load the device program: {}", failures.join("; "))))
}
