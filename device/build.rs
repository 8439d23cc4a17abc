//! Compiles the device code in `kernels/` as host C++ for the CPU backend, with the flags every build of the
//! kernel code shares (`ringvisor_build::kernel_compiler`), stricter warnings, and the sanitizer named by
//! `RINGVISOR_KERNEL_SANITIZER` (`thread` or `address`; the binary must then be run with the same runtime:
//! see `.ci/run`).
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let kernels = manifest.join("..").join("kernels");
    println!("cargo:rerun-if-changed={}", kernels.display());
    println!("cargo:kernels={}", kernels.display());

    let sanitizer = ringvisor_build::Sanitizer::from_env().unwrap_or_else(|e| panic!("{e}"));
    let mut build = ringvisor_build::kernel_compiler_with(sanitizer);
    build.file(kernels.join("host").join("rv_host.cpp")).extra_warnings(true).warnings_into_errors(true);
    // the sanitizer runtime, for every binary that links the kernel code
    for lib in sanitizer.map_or(&[][..], |s| s.runtime_libs()) {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    build.compile("ringvisor_kernels");
}
