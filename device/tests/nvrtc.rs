//! Every kernel source (protocol, built-in behaviours, the example user behaviour, the CUDA entry points, and
//! the `static_assert`s of the host's layout, so NVRTC's view of every shared struct is checked too)
//! compiles with NVRTC to CUBIN for sm_70, sm_80 and sm_90 (those of them the installed NVRTC supports: CUDA
//! 11.8's, which CI installs, has all three; CUDA 13's has no sm_70). No GPU is needed, only the NVRTC library.
//!
//! Without the library the test says that it skipped; with `RINGVISOR_REQUIRE_NVRTC=1` (set by `.ci/run`) a
//! missing library is a failure.

use ringvisor_device::{cuda_source, nvrtc, BehaviourSet, UserBehaviour};

const USER_SOURCE: &str = include_str!("../../examples/moving-average/kernels/moving_average.cu");

fn nvrtc_or_skip() -> bool {
    if nvrtc::available() {
        return true;
    }
    let required = std::env::var("RINGVISOR_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    assert!(!required, "RINGVISOR_REQUIRE_NVRTC=1 but libnvrtc.so cannot be loaded (see README: NVRTC)");
    eprintln!("SKIPPED: libnvrtc.so not found; set RINGVISOR_REQUIRE_NVRTC=1 to make this a failure");
    false
}

fn behaviours() -> BehaviourSet {
    let mut set = BehaviourSet::builtins();
    // The host function is irrelevant to NVRTC; reuse a built-in's so the set is well formed.
    // SAFETY: returns a pointer to a function of the linked kernel library.
    let host_fn = unsafe { ringvisor_device::ffi::rv_builtin_behaviour(1) }.expect("echo is linked");
    set.register(UserBehaviour {
        name: "moving_average",
        function: "moving_average",
        host_fn,
        cuda_source: USER_SOURCE,
    })
    .unwrap();
    set
}

#[test]
fn device_program_compiles_to_cubin_for_sm70_sm80_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    let program = cuda_source::program(&behaviours()).unwrap();
    assert!(program.contains("moving_average(ctx, msg)"), "the user behaviour is dispatched");
    let supported = nvrtc::supported_archs().unwrap();
    let targets: Vec<u32> = [70, 80, 90].into_iter().filter(|a| supported.contains(a)).collect();
    assert!(targets.contains(&80) && targets.contains(&90), "NVRTC supports {supported:?}");
    if targets.len() < 3 {
        eprintln!("note: this NVRTC does not support sm_70 (supported: {supported:?}); checked {targets:?}");
    }
    for (major, minor) in targets.iter().map(|a| (a / 10, a % 10)) {
        let cubin = nvrtc::compile(&program, "ringvisor.cu", major, minor, nvrtc::Output::Cubin)
            .unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
        assert!(cubin.len() > 1024 && cubin.starts_with(b"\x7fELF"), "sm_{major}{minor}: not a CUBIN");
    }
    let ptx = nvrtc::compile(&program, "ringvisor.cu", 8, 0, nvrtc::Output::Ptx).unwrap();
    let ptx = String::from_utf8_lossy(&ptx);
    for entry in ["rv_persistent_kernel", "rv_init_kernel"] {
        assert!(ptx.contains(&format!(".entry {entry}")), "{entry} is a kernel entry point");
    }
    // the protocol's ordering survives compilation: acquire loads and release stores at system scope
    assert!(ptx.contains("ld.acquire.sys") && ptx.contains("st.release.sys"));
}

#[test]
fn a_compile_error_is_reported_with_the_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let err =
        nvrtc::compile("__global__ void k() { undefined_thing(); }", "bad.cu", 8, 0, nvrtc::Output::Ptx).unwrap_err();
    assert!(err.to_string().contains("undefined_thing"), "{err}");
}

#[test]
fn a_layout_that_differs_from_the_host_s_does_not_build() {
    if !nvrtc_or_skip() {
        return;
    }
    // The program carries the host compiler's layout as static_asserts: a planted disagreement must fail.
    let planted = "static_assert(RV_OFFSETOF(rv_control_block, heartbeat) == 16ull, \"planted\");\n";
    let program = cuda_source::program(&behaviours()).unwrap() + planted;
    let err = nvrtc::compile(&program, "ringvisor.cu", 8, 0, nvrtc::Output::Ptx).unwrap_err();
    assert!(err.to_string().contains("planted"), "{err}");
}
