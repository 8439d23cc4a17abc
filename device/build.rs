//! Compiles the device code in `kernels/` as host C++ for the CPU backend.
//!
//! `RINGVISOR_KERNEL_SANITIZER=thread` or `=address` builds it with ThreadSanitizer or with
//! AddressSanitizer + UndefinedBehaviorSanitizer (the binary must then be linked with the same runtime:
//! see `.ci/run`).
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let kernels = manifest.join("..").join("kernels");
    println!("cargo:rerun-if-changed={}", kernels.display());
    println!("cargo:rerun-if-env-changed=RINGVISOR_KERNEL_SANITIZER");
    println!("cargo:kernels={}", kernels.display());

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(kernels.join("host").join("rv_host.cpp"))
        .include(&kernels)
        .flag_if_supported("-std=c++17")
        .flag_if_supported("-fno-exceptions")
        .flag_if_supported("-fno-rtti")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .opt_level(2);
    match std::env::var("RINGVISOR_KERNEL_SANITIZER").as_deref() {
        Ok("thread") => {
            build.flag("-fsanitize=thread").flag("-g").flag("-fno-omit-frame-pointer");
            // the sanitizer runtime, for every binary that links the kernel code
            println!("cargo:rustc-link-lib=dylib=tsan");
        }
        Ok("address") => {
            build
                .flag("-fsanitize=address,undefined")
                .flag("-fno-sanitize-recover=undefined")
                .flag("-g")
                .flag("-fno-omit-frame-pointer");
            println!("cargo:rustc-link-lib=dylib=asan");
            println!("cargo:rustc-link-lib=dylib=ubsan");
        }
        Ok("") | Err(_) => {}
        Ok(other) => panic!("RINGVISOR_KERNEL_SANITIZER must be `thread` or `address`, not `{other}`"),
    }
    build.compile("ringvisor_kernels");
}
