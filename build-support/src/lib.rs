//! # ringvisor-build
//!
//! Use from a `build.rs` to turn device behaviours written in CUDA C into behaviours a ringvisor device can run:
//!
//! ```no_run
//! // build.rs
//! ringvisor_build::Behaviours::new()
//!     .behaviour("moving_average", "kernels/moving_average.cu", "moving_average")
//!     .compile("my_behaviours")
//!     .expect("behaviours compile");
//! ```
//!
//! ```ignore
//! // src/main.rs
//! include!(concat!(env!("OUT_DIR"), "/ringvisor_behaviours.rs"));
//! let set = ringvisor::device::BehaviourSet::builtins().with(user_behaviours()[0])?;
//! ```
//!
//! A behaviour file includes `"rv_behaviour.h"` and defines
//! `RV_BEHAVIOUR_FN int name(rv_actor_ctx *ctx, const rv_envelope *msg)`. `compile` builds it with the host C++
//! compiler for the CPU backend (the same code NVRTC compiles for the GPU), exports it under a C symbol, and
//! writes `$OUT_DIR/ringvisor_behaviours.rs` with a `user_behaviours()` function returning one
//! `UserBehaviour` per behaviour, its CUDA source embedded for the CUDA backend (its WGSL version too, for the
//! wgpu backend, when given with `wgsl`; and its state size, when declared with `state`), and a `c_layouts()`
//! function reporting the C structs listed with `c_struct`, for a test to check the Rust mirrors against.
#![warn(missing_docs)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The directory holding ringvisor's device headers (`rv_behaviour.h` and what it includes).
pub fn kernel_include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("kernels")
}

/// The environment variable that builds kernel code with a sanitizer: `thread` (ThreadSanitizer) or `address`
/// (AddressSanitizer + UndefinedBehaviorSanitizer). The binary must then be run with the same runtime loaded
/// first (see `.ci/run`).
pub const SANITIZER_ENV: &str = "RINGVISOR_KERNEL_SANITIZER";

/// A sanitizer the kernel code can be built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sanitizer {
    /// ThreadSanitizer.
    Thread,
    /// AddressSanitizer and UndefinedBehaviorSanitizer.
    Address,
}

impl Sanitizer {
    /// The sanitizer [`SANITIZER_ENV`] names, if any (and tells Cargo to rebuild when it changes).
    pub fn from_env() -> Result<Option<Sanitizer>, BuildError> {
        println!("cargo:rerun-if-env-changed={SANITIZER_ENV}");
        match std::env::var(SANITIZER_ENV).as_deref() {
            Ok("thread") => Ok(Some(Sanitizer::Thread)),
            Ok("address") => Ok(Some(Sanitizer::Address)),
            Ok("") | Err(_) => Ok(None),
            Ok(other) => Err(BuildError::UnknownSanitizer(other.to_string())),
        }
    }

    /// The runtime libraries a binary built with this sanitizer links.
    pub fn runtime_libs(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Thread => &["tsan"],
            Sanitizer::Address => &["asan", "ubsan"],
        }
    }
}

/// A C++ compiler set up for ringvisor's kernel code as the CPU backend runs it: C++17, no exceptions or RTTI,
/// warnings on, `-O2`, the device headers on the include path, and the sanitizer of [`SANITIZER_ENV`].
pub fn kernel_compiler() -> Result<cc::Build, BuildError> {
    Ok(kernel_compiler_with(Sanitizer::from_env()?))
}

/// [`kernel_compiler`] with the sanitizer given (for a build script that also needs it, to link its runtime).
pub fn kernel_compiler_with(sanitizer: Option<Sanitizer>) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .include(kernel_include_dir())
        .flag_if_supported("-std=c++17")
        .flag_if_supported("-fno-exceptions")
        .flag_if_supported("-fno-rtti")
        .warnings(true)
        .opt_level(2);
    match sanitizer {
        Some(Sanitizer::Thread) => {
            build.flag("-fsanitize=thread").flag("-g").flag("-fno-omit-frame-pointer");
        }
        Some(Sanitizer::Address) => {
            build
                .flag("-fsanitize=address,undefined")
                .flag("-fno-sanitize-recover=undefined")
                .flag("-g")
                .flag("-fno-omit-frame-pointer");
        }
        None => {}
    }
    build
}

/// Errors of [`Behaviours::compile`].
#[derive(Debug)]
pub enum BuildError {
    /// A name or function is not a valid identifier, or appears twice.
    InvalidName(String),
    /// A behaviour file could not be read.
    Io(PathBuf, std::io::Error),
    /// A Cargo environment variable is missing (not running inside a build script).
    NotInBuildScript(&'static str),
    /// [`SANITIZER_ENV`] names no sanitizer.
    UnknownSanitizer(String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::InvalidName(n) => write!(f, "invalid behaviour name or function: {n}"),
            BuildError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            BuildError::NotInBuildScript(v) => write!(f, "{v} is not set: call compile() from a build script"),
            BuildError::UnknownSanitizer(v) => write!(f, "{SANITIZER_ENV} must be `thread` or `address`, not `{v}`"),
        }
    }
}

impl std::error::Error for BuildError {}

struct Entry {
    name: String,
    file: PathBuf,
    function: String,
    /// The C type of its state, if declared.
    state_type: Option<String>,
    /// Its WGSL version, if given.
    wgsl_file: Option<PathBuf>,
}

/// A C struct whose layout the generated `c_layouts()` reports.
struct CStruct {
    c_type: String,
    fields: Vec<String>,
}

/// A set of user behaviours to compile.
#[derive(Default)]
pub struct Behaviours {
    entries: Vec<Entry>,
    c_structs: Vec<CStruct>,
    crate_path: Option<String>,
}

/// `file` as given (absolute) or relative to the crate's manifest directory.
fn in_crate(manifest: &Path, file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_path_buf()
    } else {
        manifest.join(file)
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Behaviours {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds behaviour `name`, implemented by device function `function` in `file`.
    pub fn behaviour(mut self, name: &str, file: impl AsRef<Path>, function: &str) -> Self {
        self.entries.push(Entry {
            name: name.into(),
            file: file.as_ref().to_path_buf(),
            function: function.into(),
            state_type: None,
            wgsl_file: None,
        });
        self
    }

    /// Gives the behaviour added last a WGSL version, for the wgpu backend: `file` defines
    /// `fn <function>() -> i32` (the same function name as the C file), written against the WGSL helpers
    /// `docs/behaviours.md` lists. Without one, creating the behaviour on the wgpu backend is refused as an
    /// unknown behaviour. `compile` only embeds the file: `ringvisor::device::wgsl_check` (in a test) or
    /// opening a wgpu device compiles it. Call after `behaviour`.
    pub fn wgsl(mut self, file: impl AsRef<Path>) -> Self {
        match self.entries.last_mut() {
            Some(e) => e.wgsl_file = Some(file.as_ref().to_path_buf()),
            // Reported by `compile` as an invalid name: there is no behaviour to attach it to.
            None => self.entries.push(Entry {
                name: String::new(),
                file: PathBuf::new(),
                function: String::new(),
                state_type: None,
                wgsl_file: Some(file.as_ref().to_path_buf()),
            }),
        }
        self
    }

    /// Declares the C type of the state of the behaviour added last (e.g. `"rl_state"`, a typedef or struct
    /// name in its file): its `sizeof`, computed by the compiler, becomes the behaviour's
    /// `UserBehaviour::state_bytes`, and creating the behaviour on a device whose state regions are smaller
    /// fails with `DeviceError::StateTooSmall` instead of writing past the region. Call after `behaviour`.
    pub fn state(mut self, c_type: &str) -> Self {
        if let Some(e) = self.entries.last_mut() {
            e.state_type = Some(c_type.into());
        } else {
            // Reported by `compile` as an invalid name: there is no behaviour to attach it to.
            self.entries.push(Entry {
                name: String::new(),
                file: PathBuf::new(),
                function: String::new(),
                state_type: Some(c_type.into()),
                wgsl_file: None,
            });
        }
        self
    }

    /// Reports the layout of C struct `c_type` (a typedef or struct name in one of the files) and of the
    /// listed fields, as the C compiler lays them out: the generated `c_layouts()` returns one
    /// `CLayout` per struct, for a test to [`check`](https://docs.rs/ringvisor-device) against the Rust
    /// mirror (`rust_layout!(Reply, [client, granted])`), so the two cannot drift apart unnoticed. A field
    /// that does not exist is a compile error of the build script.
    pub fn c_struct(mut self, c_type: &str, fields: &[&str]) -> Self {
        self.c_structs.push(CStruct { c_type: c_type.into(), fields: fields.iter().map(|f| f.to_string()).collect() });
        self
    }

    /// The Rust path of the device crate in the generated code (default `ringvisor::device`).
    pub fn crate_path(mut self, path: &str) -> Self {
        self.crate_path = Some(path.into());
        self
    }

    /// Compiles the behaviours into static library `lib_name` and writes `$OUT_DIR/ringvisor_behaviours.rs`.
    pub fn compile(self, lib_name: &str) -> Result<(), BuildError> {
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or(BuildError::NotInBuildScript("OUT_DIR"))?);
        let manifest = PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR").ok_or(BuildError::NotInBuildScript("CARGO_MANIFEST_DIR"))?,
        );
        let krate = self.crate_path.unwrap_or_else(|| "ringvisor::device".into());
        // the device headers the behaviours include: a change there (a layout) must rebuild them (cargo scans a
        // directory named here for any change)
        println!("cargo:rerun-if-changed={}", kernel_include_dir().display());
        let mut seen = std::collections::HashSet::new();
        let mut files = Vec::new();
        for e in &self.entries {
            let state_ok = e.state_type.as_deref().is_none_or(|t| t.split(' ').all(is_ident));
            if !is_ident(&e.name) || !is_ident(&e.function) || !state_ok || !seen.insert(e.name.clone()) {
                let state = e.state_type.as_deref().map(|t| format!(" / state `{t}`")).unwrap_or_default();
                return Err(BuildError::InvalidName(format!("{} / {}{state}", e.name, e.function)));
            }
            let path = in_crate(&manifest, &e.file);
            std::fs::metadata(&path).map_err(|err| BuildError::Io(path.clone(), err))?;
            println!("cargo:rerun-if-changed={}", path.display());
            if !files.contains(&path) {
                files.push(path);
            }
            if let Some(wgsl) = &e.wgsl_file {
                let wgsl = in_crate(&manifest, wgsl);
                std::fs::metadata(&wgsl).map_err(|err| BuildError::Io(wgsl.clone(), err))?;
                println!("cargo:rerun-if-changed={}", wgsl.display());
            }
        }
        let mut cpp = String::from("/* generated by ringvisor-build */\n#include \"rv_behaviour.h\"\n");
        for f in &files {
            let _ = writeln!(cpp, "#include \"{}\"", f.display());
        }
        let mut rs = String::from("// generated by ringvisor-build\n");
        let _ = writeln!(rs, "extern \"C\" {{");
        for e in &self.entries {
            let _ = writeln!(
                cpp,
                "extern \"C\" int rv_user_{name}(rv_actor_ctx *ctx, const rv_envelope *msg) {{ return {f}(ctx, msg); }}",
                name = e.name,
                f = e.function
            );
            let _ = writeln!(
                rs,
                "    fn rv_user_{}(ctx: *mut {krate}::ffi::RvActorCtx, msg: *const {krate}::layout::RawEnvelope) -> i32;",
                e.name
            );
        }
        // Each declared state's size as the compiler sees it, a constant the generated Rust reads.
        for e in self.entries.iter().filter(|e| e.state_type.is_some()) {
            let _ = writeln!(
                cpp,
                "extern \"C\" const uint32_t rv_user_state_bytes_{}; const uint32_t rv_user_state_bytes_{} = \
                 (uint32_t)sizeof({});",
                e.name,
                e.name,
                e.state_type.as_deref().unwrap_or_default()
            );
            let _ = writeln!(rs, "    static rv_user_state_bytes_{}: u32;", e.name);
        }
        for c in &self.c_structs {
            if !is_ident(&c.c_type) || c.fields.is_empty() || !c.fields.iter().all(|f| is_ident(f)) {
                return Err(BuildError::InvalidName(format!("struct `{}` / fields {:?}", c.c_type, c.fields)));
            }
            let _ = writeln!(rs, "    static rv_user_c_layout_{}: [u64; {}];", c.c_type, 1 + 2 * c.fields.len());
        }
        let _ = writeln!(rs, "}}\n\n/// The behaviours compiled by this crate's build script.");
        let _ =
            writeln!(rs, "pub fn user_behaviours() -> ::std::vec::Vec<{krate}::UserBehaviour> {{\n    ::std::vec![");
        for e in &self.entries {
            let path = in_crate(&manifest, &e.file);
            let wgsl = match &e.wgsl_file {
                Some(f) => format!("include_str!({:?})", in_crate(&manifest, f).display().to_string()),
                None => "\"\"".into(),
            };
            let state = match e.state_type {
                Some(_) => {
                    let _ = writeln!(rs, "        // SAFETY: a constant the compiled C file defines and never writes.");
                    format!("unsafe {{ rv_user_state_bytes_{} }}", e.name)
                }
                None => "0".into(),
            };
            let _ = writeln!(
                rs,
                "        {krate}::UserBehaviour {{ name: {:?}, function: {:?}, host_fn: rv_user_{}, cuda_source: include_str!({:?}), wgsl_source: {wgsl}, state_bytes: {state} }},",
                e.name,
                e.function,
                e.name,
                path.display().to_string()
            );
        }
        let _ = writeln!(rs, "    ]\n}}");
        Self::write_c_layouts(&self.c_structs, &krate, &mut cpp, &mut rs);
        let cpp_path = out_dir.join("ringvisor_behaviours.cpp");
        std::fs::write(&cpp_path, cpp).map_err(|e| BuildError::Io(cpp_path.clone(), e))?;
        let rs_path = out_dir.join("ringvisor_behaviours.rs");
        std::fs::write(&rs_path, rs).map_err(|e| BuildError::Io(rs_path.clone(), e))?;

        kernel_compiler()?.file(&cpp_path).compile(lib_name);
        Ok(())
    }

    /// Each reported struct (names checked by `compile`) as an array the C compiler fills (`sizeof`, then each
    /// field's offset and size), and `c_layouts()` reading them into `CLayout`s.
    fn write_c_layouts(structs: &[CStruct], krate: &str, cpp: &mut String, rs: &mut String) {
        let _ = writeln!(
            rs,
            "\n/// The C structs this crate's build script reports (`c_struct`), as the C compiler laid them \
             out.\n#[allow(dead_code)]\npub fn c_layouts() -> ::std::vec::Vec<{krate}::CLayout> {{\n    ::std::vec!["
        );
        for c in structs {
            let (t, n) = (&c.c_type, 1 + 2 * c.fields.len());
            let mut values = format!("(uint64_t)sizeof({t})");
            for f in &c.fields {
                let _ = write!(values, ", (uint64_t)RV_OFFSETOF({t}, {f}), (uint64_t)sizeof((({t} *)0)->{f})");
            }
            let _ = writeln!(
                cpp,
                "extern \"C\" const uint64_t rv_user_c_layout_{t}[{n}]; const uint64_t rv_user_c_layout_{t}[{n}] = {{ {values} }};"
            );
            let _ = writeln!(
                rs,
                "        {{\n            // SAFETY: a constant array the compiled C file defines and never writes."
            );
            let _ = writeln!(rs, "            let raw = unsafe {{ &rv_user_c_layout_{t} }};");
            let _ = writeln!(
                rs,
                "            {krate}::CLayout {{ name: {t:?}, size: raw[0] as usize, fields: ::std::vec!["
            );
            for (i, f) in c.fields.iter().enumerate() {
                let _ = writeln!(
                    rs,
                    "                {krate}::CField {{ name: {f:?}, offset: raw[{}] as usize, size: raw[{}] as usize }},",
                    1 + 2 * i,
                    2 + 2 * i
                );
            }
            let _ = writeln!(rs, "            ] }}\n        }},");
        }
        let _ = writeln!(rs, "    ]\n}}");
    }
}
