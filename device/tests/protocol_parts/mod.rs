//! The device protocol's parts, as `kernels/rv_protocol.cu` includes them (the one list of them): the tests that
//! read the protocol's source take its parts from there, so a new part is read without being listed again.
#![allow(dead_code)]

use std::path::PathBuf;

/// One part: its stem (`view`), its C source (`kernels/protocol/view.cu`) and its WGSL twin
/// (`kernels/wgsl/protocol/view.wgsl`).
pub struct Part {
    pub stem: String,
    pub c_file: String,
    pub c: String,
    pub wgsl: String,
}

fn kernels() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kernels")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(kernels().join(path)).unwrap_or_else(|e| panic!("kernels/{path}: {e}"))
}

/// The parts `kernels/rv_protocol.cu` includes, in its order.
pub fn parts() -> Vec<Part> {
    let parts: Vec<Part> = read("rv_protocol.cu")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#include \"protocol/")?.strip_suffix(".cu\"").map(str::to_string))
        .map(|stem| Part {
            c_file: format!("protocol/{stem}.cu"),
            c: read(&format!("protocol/{stem}.cu")),
            wgsl: read(&format!("wgsl/protocol/{stem}.wgsl")),
            stem,
        })
        .collect();
    assert!(parts.len() >= 4, "rv_protocol.cu includes only {} parts", parts.len());
    parts
}
