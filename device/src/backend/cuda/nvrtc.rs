//! NVRTC: compiles the device program to PTX (for loading) or CUBIN (to prove it compiles for a target).
//!
//! cudarc loads `libnvrtc.so` at first use and panics if it is missing, so [`available`] is checked first and
//! a missing library becomes [`DeviceError::BackendUnavailable`].

use crate::error::DeviceError;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, CString};

/// What to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// PTX for a virtual architecture (`compute_XX`), loadable by any newer driver.
    Ptx,
    /// A CUBIN for a real architecture (`sm_XX`).
    Cubin,
}

/// True if the NVRTC library can be loaded.
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library; no NVRTC function is called.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

fn check(rc: sys::nvrtcResult, what: &str) -> Result<(), DeviceError> {
    if rc == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(DeviceError::BackendUnavailable(format!("nvrtc {what} failed: {rc:?}")))
    }
}

/// The real architectures (`sm_XX`, as `XX`: 70, 80, 90, ...) the installed NVRTC compiles for. Newer NVRTC
/// releases drop old architectures (CUDA 13's has no sm_70), so a caller that targets a list checks it here.
pub fn supported_archs() -> Result<Vec<u32>, DeviceError> {
    if !available() {
        return Err(DeviceError::BackendUnavailable("the NVRTC library (libnvrtc.so) was not found".into()));
    }
    let mut count = 0i32;
    // SAFETY: writes one int.
    check(unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) }, "supported architectures")?;
    let mut archs = vec![0i32; count.max(0) as usize];
    // SAFETY: the buffer holds the `count` ints NVRTC reported.
    check(unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }, "supported architectures")?;
    Ok(archs.into_iter().filter_map(|a| u32::try_from(a).ok()).collect())
}

/// Compiles `source` for compute capability `major.minor` (at least 7.0: the protocol uses `__nanosleep` and
/// acquire/release PTX).
pub fn compile(source: &str, name: &str, major: u32, minor: u32, output: Output) -> Result<Vec<u8>, DeviceError> {
    compile_with_log(source, name, major, minor, output, &[]).map(|(image, _)| image)
}

/// Resource use of each kernel of `source` as ptxas reports it for `sm_{major}{minor}` (registers, stack
/// frame, spill stores and loads): the compile log of a CUBIN build with `--ptxas-options=-v`.
pub fn resource_report(source: &str, major: u32, minor: u32) -> Result<String, DeviceError> {
    compile_with_log(source, "ringvisor.cu", major, minor, Output::Cubin, &["--ptxas-options=-v"]).map(|(_, log)| log)
}

/// [`compile`] with `extra` options; also returns the compile log.
pub fn compile_with_log(
    source: &str,
    name: &str,
    major: u32,
    minor: u32,
    output: Output,
    extra: &[&str],
) -> Result<(Vec<u8>, String), DeviceError> {
    if major < 7 {
        return Err(DeviceError::InvalidConfig(format!("compute capability {major}.{minor} is below 7.0")));
    }
    if !available() {
        return Err(DeviceError::BackendUnavailable(
            "the NVRTC library (libnvrtc.so) was not found; install it and put it on LD_LIBRARY_PATH".into(),
        ));
    }
    let src = CString::new(source).map_err(|_| DeviceError::InvalidConfig("kernel source contains NUL".into()))?;
    let cname = CString::new(name).map_err(|_| DeviceError::InvalidConfig("program name contains NUL".into()))?;
    let arch = match output {
        Output::Ptx => format!("--gpu-architecture=compute_{major}{minor}"),
        Output::Cubin => format!("--gpu-architecture=sm_{major}{minor}"),
    };
    let options: Vec<CString> = [arch.as_str(), "--std=c++17", "-default-device"]
        .iter()
        .chain(extra)
        .map(|o| CString::new(*o).map_err(|_| DeviceError::InvalidConfig(format!("option {o:?} contains NUL"))))
        .collect::<Result<_, _>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers are passed (the program is flattened).
    check(
        unsafe {
            sys::nvrtcCreateProgram(&mut prog, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null())
        },
        "create",
    )?;
    let result = (|| {
        // SAFETY: `prog` was created above; the option pointers outlive the call.
        let rc = unsafe { sys::nvrtcCompileProgram(prog, option_ptrs.len() as i32, option_ptrs.as_ptr()) };
        if rc != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(DeviceError::InvalidConfig(format!("nvrtc compile ({arch}) failed:\n{}", log(prog))));
        }
        let mut size = 0usize;
        let mut buf;
        match output {
            Output::Ptx => {
                // SAFETY: `prog` compiled; the buffer has the size NVRTC asked for.
                unsafe {
                    check(sys::nvrtcGetPTXSize(prog, &mut size), "ptx size")?;
                    buf = vec![0u8; size];
                    check(sys::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut c_char), "ptx")?;
                }
            }
            Output::Cubin => {
                // SAFETY: as above.
                unsafe {
                    check(sys::nvrtcGetCUBINSize(prog, &mut size), "cubin size")?;
                    buf = vec![0u8; size];
                    check(sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char), "cubin")?;
                }
            }
        }
        Ok((buf, log(prog)))
    })();
    // SAFETY: destroys the program created above, once.
    unsafe { sys::nvrtcDestroyProgram(&mut prog) };
    result
}

fn log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is a live program; the buffer has the size NVRTC reported.
    unsafe {
        if sys::nvrtcGetProgramLogSize(prog, &mut size) != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
            return String::from("(no log)");
        }
        let mut buf = vec![0u8; size];
        if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) != sys::nvrtcResult::NVRTC_SUCCESS {
            return String::from("(log unavailable)");
        }
        String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
    }
}
