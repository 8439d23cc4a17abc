//! The WGSL program: a prelude generated from the C layout report (every offset, size and constant the WGSL code
//! uses), the portability layer and the protocol (`kernels/wgsl/`), the f64 helpers where the adapter has shader
//! f64, the built-in behaviours and the user's WGSL behaviours, and a generated dispatch switch over them.

use std::fmt::Write as _;

use crate::behaviour::{BehaviourSet, FIRST_USER_BEHAVIOUR};
use crate::error::DeviceError;
use crate::ffi::{rv_layout_report, LayoutEntry};

const PORT: &str = include_str!("../../../../kernels/wgsl/rv_port.wgsl");
/// The protocol's parts, in the order the program concatenates them (`kernels/wgsl/rv_protocol.wgsl` says what
/// each holds and how the port differs from the C code).
const PROTOCOL: [&str; 5] = [
    include_str!("../../../../kernels/wgsl/protocol/view.wgsl"),
    include_str!("../../../../kernels/wgsl/protocol/api.wgsl"),
    include_str!("../../../../kernels/wgsl/protocol/actor.wgsl"),
    include_str!("../../../../kernels/wgsl/protocol/block0.wgsl"),
    include_str!("../../../../kernels/wgsl/protocol/entry.wgsl"),
];

const F64: &str = include_str!("../../../../kernels/wgsl/rv_f64.wgsl");

/// The built-in behaviours written in WGSL: name, function, source (as `kernels/rv_builtins.h` lists them; checked
/// by a test in `backend/mod.rs`).
pub(crate) const WGSL_BEHAVIOURS: [(&str, &str, &str); 6] = [
    ("echo", "rv_behaviour_echo", include_str!("../../../../kernels/wgsl/behaviours/echo.wgsl")),
    ("counter", "rv_behaviour_counter", include_str!("../../../../kernels/wgsl/behaviours/counter.wgsl")),
    ("kv", "rv_behaviour_kv", include_str!("../../../../kernels/wgsl/behaviours/kv.wgsl")),
    ("test", "rv_behaviour_test", include_str!("../../../../kernels/wgsl/behaviours/test.wgsl")),
    ("sensor", "rv_behaviour_sensor", include_str!("../../../../kernels/wgsl/behaviours/sensor.wgsl")),
    ("alerts", "rv_behaviour_alerts", include_str!("../../../../kernels/wgsl/behaviours/alerts.wgsl")),
];

/// A behaviour of a set with a WGSL version.
pub(crate) struct WgslBehaviour<'a> {
    pub id: u32,
    pub name: &'a str,
    pub function: &'a str,
    pub source: &'static str,
}

/// Whether WGSL `source` computes in f64: it names the type or an `rv_f64.wgsl` helper (a word containing
/// `f64`), or writes an f64 literal (`1.5lf`). Such a behaviour is in the program only where the adapter has
/// shader f64. Comments do not count.
pub(crate) fn uses_f64(source: &str) -> bool {
    without_comments(source).split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).any(|word| {
        let literal = word.starts_with(|c: char| c.is_ascii_digit() || c == '.') && word.ends_with("lf");
        literal || word.split('.').any(|part| part.contains("f64"))
    })
}

/// `source` with its `//` and (nested) `/* */` comments replaced by spaces.
fn without_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    let mut depth = 0u32;
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('*')) => {
                chars.next();
                depth += 1;
            }
            ('*', Some('/')) if depth > 0 => {
                chars.next();
                depth -= 1;
            }
            ('/', Some('/')) if depth == 0 => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                out.push('\n');
                continue;
            }
            _ if depth > 0 => {}
            _ => {
                out.push(c);
                continue;
            }
        }
        out.push(' ');
    }
    out
}

/// The behaviours of `set` this backend runs (built-ins in the order of their ids, then the user's): a WGSL
/// version, and shader f64 (`f64`) if it computes in f64.
pub(crate) fn wgsl_behaviours(set: &BehaviourSet, f64: bool) -> Vec<WgslBehaviour<'_>> {
    set.entries()
        .iter()
        .filter_map(|e| {
            let builtin = (e.id.0 < FIRST_USER_BEHAVIOUR)
                .then(|| WGSL_BEHAVIOURS.iter().find(|(name, _, _)| *name == e.name))
                .flatten();
            let (function, source) = match (builtin, e.wgsl_source) {
                (Some(&(_, function, source)), _) => (function, source),
                (None, Some(source)) => (e.function.as_str(), source),
                (None, None) => return None,
            };
            Some(WgslBehaviour { id: e.id.0, name: &e.name, function, source })
        })
        .filter(|b| f64 || !uses_f64(b.source))
        .collect()
}

/// The C layout report's entries as (name, value, extra).
fn report() -> Vec<(String, u64, u64)> {
    let mut count = 0u32;
    // SAFETY: rv_layout_report returns a pointer to a static array of `count` entries whose names are static,
    // NUL-terminated strings.
    let entries: &[LayoutEntry] = unsafe { std::slice::from_raw_parts(rv_layout_report(&mut count), count as usize) };
    entries
        .iter()
        .map(|e| {
            // SAFETY: see above: a static NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(e.name) }.to_string_lossy().into_owned();
            (name, e.value, e.extra)
        })
        .collect()
}

/// Result codes are signed in the C code (`RV_STALL` is -1): they are `i32` constants in WGSL too.
fn is_signed_constant(name: &str) -> bool {
    name == "RV_OK" || name == "RV_STALL" || name.starts_with("RV_ERR_")
}

/// The WGSL prelude: for every struct of the C layout report `SZ_<struct>`, for every field `O_<struct>_<field>`
/// (byte offset) and `W_<struct>_<field>` (size in bytes), and every protocol constant `RV_*` (a 64-bit one as
/// `RV_*_LO` and `RV_*_HI`). Struct names lose their `rv_` prefix.
pub(crate) fn prelude() -> String {
    let mut out = String::from("// generated by ringvisor-device from the C layout report (kernels/rv_layout.h)\n");
    for (name, value, extra) in report() {
        if let Some(ty) = name.strip_prefix("sizeof ") {
            out.push_str(&format!("const SZ_{}: u32 = {value}u;\n", ty.trim_start_matches("rv_")));
        } else if let Some((ty, field)) = name.split_once('.') {
            let ty = ty.trim_start_matches("rv_");
            out.push_str(&format!("const O_{ty}_{field}: u32 = {value}u;\nconst W_{ty}_{field}: u32 = {extra}u;\n"));
        } else if is_signed_constant(&name) {
            out.push_str(&format!("const {name}: i32 = {}i;\n", value as i64));
        } else if value > u64::from(u32::MAX) {
            out.push_str(&format!(
                "const {name}_LO: u32 = {}u;\nconst {name}_HI: u32 = {}u;\n",
                value & 0xFFFF_FFFF,
                value >> 32
            ));
        } else {
            out.push_str(&format!("const {name}: u32 = {value}u;\n"));
        }
    }
    out
}

/// The registered behaviours this backend cannot run (no WGSL version, or one in f64 on an adapter without
/// shader f64).
pub(crate) fn missing_behaviours(set: &BehaviourSet, f64: bool) -> Vec<String> {
    let runs = wgsl_behaviours(set, f64);
    set.names().filter(|n| !runs.iter().any(|b| b.name == *n)).map(str::to_string).collect()
}

/// The whole program for `set`: prelude, port, protocol, (the f64 helpers,) behaviours, dispatch switch.
pub(crate) fn source(set: &BehaviourSet, f64: bool) -> String {
    let behaviours = wgsl_behaviours(set, f64);
    let mut out = prelude();
    out.push_str(PORT);
    PROTOCOL.iter().for_each(|part| out.push_str(part));
    if f64 {
        out.push_str(F64);
    }
    let mut known = String::new();
    let mut calls = String::new();
    for b in &behaviours {
        let _ = writeln!(out, "// ---- behaviour `{}` ----", b.name);
        out.push_str(b.source);
        out.push('\n');
        let _ = writeln!(known, "        case {}u: {{ return 1u; }}", b.id);
        let _ = writeln!(calls, "        case {}u: {{ return {}(); }}", b.id, b.function);
    }
    let _ = write!(
        out,
        "// generated by ringvisor-device: behaviour dispatch\n\
         fn rv_behaviour_known(b: u32) -> u32 {{\n    switch (b) {{\n{known}        default: {{ return 0u; }}\n    }}\n}}\n\
         fn rv_dispatch(b: u32) -> i32 {{\n    switch (b) {{\n{calls}        default: {{ return RV_ERR_UNKNOWN_BEHAVIOUR; }}\n    }}\n}}\n"
    );
    out
}

/// Parses and validates, with naga (what wgpu runs when a device opens), the wgpu backend's whole program for
/// `set`: the protocol, the built-ins and every WGSL behaviour registered, f64 ones included. No adapter is
/// needed: a test can check a behaviour's WGSL on any machine. An error names the line and what is wrong.
pub fn check(set: &BehaviourSet) -> Result<(), DeviceError> {
    use wgpu::naga;
    let program = source(set, true);
    let module = naga::front::wgsl::parse_str(&program).map_err(|e| {
        DeviceError::InvalidConfig(format!("the WGSL program does not parse:\n{}", e.emit_to_string(&program)))
    })?;
    let capabilities = naga::valid::Capabilities::FLOAT64;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities).validate(&module).map_err(|e| {
        DeviceError::InvalidConfig(format!("the WGSL program is not valid:\n{}", e.emit_to_string(&program)))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_user_wgsl(wgsl_source: &'static str) -> BehaviourSet {
        // SAFETY: returns a pointer to a function of the linked kernel library.
        let host_fn = unsafe { crate::ffi::rv_builtin_behaviour(1) }.expect("echo is linked");
        let user = crate::UserBehaviour {
            name: "doubler",
            function: "doubler",
            host_fn,
            cuda_source: "",
            wgsl_source,
            state_bytes: 0,
        };
        BehaviourSet::builtins().with(user).unwrap()
    }

    const DOUBLER: &str =
        "fn doubler() -> i32 {\n    rv_out_set_u32(0u, 2u * rv_payload_u32(0u));\n    return rv_reply(4u);\n}\n";

    #[test]
    fn the_builtins_and_a_user_behaviour_make_a_valid_program() {
        let set = with_user_wgsl(DOUBLER);
        check(&set).unwrap();
        let program = source(&set, false);
        assert!(program.contains("case 16u: { return doubler(); }"), "the user behaviour is dispatched");
        assert!(!program.contains("rv_behaviour_sensor"), "sensor needs shader f64");
        assert_eq!(missing_behaviours(&set, false), ["sensor"]);
        assert!(missing_behaviours(&set, true).is_empty());
    }

    #[test]
    fn a_user_behaviour_that_does_not_compile_is_an_error_naming_the_line() {
        let broken = "fn doubler() -> i32 {\n    let x = rv_payload_u32(0u) * 2.0;\n    return rv_reply(4u);\n}\n";
        let err = check(&with_user_wgsl(broken)).unwrap_err().to_string();
        assert!(err.contains("rv_payload_u32(0u) * 2.0"), "{err}");
        let err = check(&with_user_wgsl("fn doubler() -> i32 { return rv_no_such_helper(); }")).unwrap_err();
        assert!(err.to_string().contains("rv_no_such_helper"), "{err}");
    }

    #[test]
    fn f64_code_is_recognised_by_its_type_helpers_and_literals() {
        assert!(uses_f64("fn f() -> i32 { let x: f64 = 1.0; return 0; }"));
        assert!(uses_f64("let m = rv_state_f64(8u);"));
        assert!(uses_f64("var t = 4.0lf;"));
        assert!(uses_f64("var t = .5lf;"));
        assert!(!uses_f64(DOUBLER));
        assert!(!uses_f64("let half = 0.5f; // the value, an f64 on the C side"));
        assert!(!uses_f64("/* an f64 /* nested: 1.0lf */ */ let x = 1u;"));
        assert!(uses_f64("/* note */ let x = 1.0lf; // f32 elsewhere"));
        let sensor = WGSL_BEHAVIOURS.iter().find(|b| b.0 == "sensor").unwrap().2;
        assert!(uses_f64(sensor));
        assert!(WGSL_BEHAVIOURS.iter().filter(|b| b.0 != "sensor").all(|b| !uses_f64(b.2)));
    }

    #[test]
    fn the_prelude_names_every_report_entry_once() {
        let prelude = prelude();
        let entries = report();
        assert!(entries.len() > 150, "the report has {} entries", entries.len());
        let mut names = std::collections::HashSet::new();
        for line in prelude.lines().filter(|l| l.starts_with("const ")) {
            let name = line["const ".len()..].split(':').next().unwrap().to_string();
            assert!(names.insert(name.clone()), "{name} is defined twice");
        }
        assert!(names.contains("O_control_block_inbox_head") && names.contains("W_envelope_payload"));
        assert!(prelude.contains("const RV_STALL: i32 = -1i;"));
        assert!(prelude.contains("const RV_GRANTED_CMD_HI: u32 = 2147483648u;"));
    }

    #[test]
    fn every_name_the_wgsl_code_uses_comes_from_the_prelude() {
        // Identifiers shaped like generated names (O_*, W_*, SZ_*, RV_*) must be defined by the prelude or by the
        // WGSL sources themselves: nothing restates a layout by hand.
        let prelude = prelude();
        let mut sources = vec![PORT, F64];
        sources.extend(PROTOCOL);
        sources.extend(WGSL_BEHAVIOURS.iter().map(|(_, _, source)| *source));
        let defined_here: String = sources.concat();
        for source in &sources {
            for word in source.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let generated = ["O_", "W_", "SZ_", "RV_"].iter().any(|p| word.starts_with(p) && word.len() > p.len());
                if !generated {
                    continue;
                }
                let in_prelude = prelude.contains(&format!("const {word}:"));
                let local = defined_here.contains(&format!("const {word}:"));
                assert!(in_prelude || local, "`{word}` is used by the WGSL code but is not in the layout report");
            }
        }
    }
}
