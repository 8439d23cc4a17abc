//! Every kernel source (protocol, built-in behaviours, the example user behaviour, the CUDA entry points, and
//! the `static_assert`s of the host's layout, so NVRTC's view of every shared struct is checked too)
//! compiles with NVRTC to CUBIN for sm_70, sm_80 and sm_90 (those of them the installed NVRTC supports: CUDA
//! 11.8's, which CI installs, has all three; CUDA 13's has no sm_70). No GPU is needed, only the NVRTC library.
//!
//! Without the library the test says that it skipped; with `RINGVISOR_REQUIRE_NVRTC=1` (set by `.ci/run`) a
//! missing library is a failure.

mod common;
use common::nvrtc_or_skip;
use ringvisor_device::{cuda_source, nvrtc, BehaviourSet, UserBehaviour};

const USER_SOURCE: &str = include_str!("../../examples/moving-average/kernels/moving_average.cu");

fn behaviours() -> BehaviourSet {
    let mut set = BehaviourSet::builtins();
    // The host function is irrelevant to NVRTC; reuse a built-in's so the set is well formed.
    // SAFETY: returns a pointer to a function of the linked kernel library.
    let host_fn = unsafe { ringvisor_device::ffi::rv_builtin_behaviour(1) }.expect("echo is linked");
    set.register(UserBehaviour {
        state_bytes: 0,
        name: "moving_average",
        function: "moving_average",
        host_fn,
        cuda_source: USER_SOURCE,
        wgsl_source: "",
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

/// What ptxas says about `kernel` in a `--ptxas-options=-v` log: (registers, stack frame, spill stores, spill
/// loads).
fn usage_of(log: &str, kernel: &str) -> Option<(u32, u32, u32, u32)> {
    let lines: Vec<&str> = log.lines().collect();
    let at = lines.iter().position(|l| l.contains("Function properties for") && l.contains(kernel))?;
    let number_before = |line: &str, unit: &str| -> Option<u32> {
        let i = line.find(unit)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let frame_line = lines[at + 1..].iter().find(|l| l.contains("stack frame"))?;
    let regs_line = lines[at + 1..].iter().find(|l| l.contains("registers"))?;
    Some((
        number_before(regs_line, "registers")?,
        number_before(frame_line, "bytes stack frame")?,
        number_before(frame_line, "bytes spill stores")?,
        number_before(frame_line, "bytes spill loads")?,
    ))
}

/// The persistent kernel is launched with 32 threads per block and a grid sized by the occupancy query: it
/// must not spill registers to local memory (every spill is a memory round trip in the protocol's hot loop)
/// on any architecture NVRTC targets here. The report names the resources, for the benchmarks' notes.
#[test]
fn the_persistent_kernel_does_not_spill_registers_on_sm70_sm80_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    let program = cuda_source::program(&behaviours()).unwrap();
    let supported = nvrtc::supported_archs().unwrap();
    for arch in [70u32, 80, 90].into_iter().filter(|a| supported.contains(a)) {
        let log = nvrtc::resource_report(&program, arch / 10, arch % 10).unwrap();
        for kernel in ["rv_persistent_kernel", "rv_init_kernel", "rv_clock_kernel"] {
            let (regs, frame, spill_stores, spill_loads) =
                usage_of(&log, kernel).unwrap_or_else(|| panic!("sm_{arch}: no report for {kernel}:\n{log}"));
            eprintln!(
                "sm_{arch} {kernel}: {regs} registers, {frame} B stack frame, spills {spill_stores}/{spill_loads}"
            );
            assert!(regs <= 255, "sm_{arch} {kernel}: {regs} registers");
            assert_eq!((spill_stores, spill_loads), (0, 0), "sm_{arch} {kernel} spills:\n{log}");
        }
    }
}

#[test]
fn the_resource_report_parser_reads_ptxas_output() {
    let log = "ptxas info    : Compiling entry function 'k' for 'sm_80'\nptxas info    : Function properties for k\n\
               ptxas         .     256 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
               ptxas info    : Used 40 registers, 360 bytes cmem[0]\n";
    assert_eq!(usage_of(log, "k"), Some((40, 256, 8, 4)));
}

/// The body of the PTX function whose name contains `name` (its definition, not a prototype).
fn ptx_function_body<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(at) = ptx[from..].find(name).map(|i| i + from) {
        let rest = &ptx[at..];
        let (semicolon, brace) = (rest.find(';'), rest.find('{'));
        if let Some(open) = brace.filter(|&b| semicolon.is_none_or(|s| b < s)) {
            let close = rest[open..].find("\n}")? + open;
            return Some(&rest[open..close]);
        }
        from = at + name.len();
    }
    None
}

/// An actor's step reads its control words (the device's fault word, its fault bits, its state) and the first
/// envelope of its inbox in one batch: on a GPU each load a thread depends on waits out a PCIe round trip, and
/// loads issued before any of their results is used overlap. In the compiled batch every load of the shared
/// region comes before the first store.
#[test]
fn the_steps_words_and_first_envelope_are_loaded_before_any_is_used() {
    if !nvrtc_or_skip() {
        return;
    }
    let program = cuda_source::program(&behaviours()).unwrap();
    let ptx = nvrtc::compile(&program, "ringvisor.cu", 8, 0, nvrtc::Output::Ptx).unwrap();
    let ptx = String::from_utf8_lossy(&ptx);
    let body = ptx_function_body(&ptx, "rv_load3_and_copy16_from_host").expect("the batch is a function of its own");
    let lines: Vec<&str> = body.lines().map(str::trim).collect();
    let at = |prefix: &str| -> Vec<usize> { (0..lines.len()).filter(|&i| lines[i].starts_with(prefix)).collect() };
    let (words, cell) = (at("ld.relaxed.sys.u32"), at("ld.v2.u64"));
    assert_eq!((words.len(), cell.len()), (3, 8), "three words and eight 16-byte units:\n{body}");
    let first_store = *at("st.").first().expect("the batch stores what it read");
    assert!(words.iter().chain(&cell).all(|&l| l < first_store), "a load after the first store:\n{body}");
}
