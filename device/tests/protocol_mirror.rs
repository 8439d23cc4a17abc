//! The device protocol is written twice, in C (`kernels/protocol/`) and in WGSL (`kernels/wgsl/protocol/`), split
//! along the same seams. This test keeps the two in step: for each part, the functions both define must appear in
//! the same order, and each such function must call the protocol's other shared functions in the same order
//! (in evaluation order: an argument's call before the call it is an argument of). What exists on one side only,
//! and each call one side makes that the other does not, is listed below with its reason.

use std::collections::{BTreeMap, BTreeSet};

mod protocol_parts;

/// The same function under two names: (C, WGSL, why the names differ).
const SAME_FUNCTION: &[(&str, &str, &str)] = &[
    ("rv_grid_now_ns", "rv_grid_now", "WGSL has no u64: the time is a vec2<u32>, not nanoseconds in one word"),
    ("rv_grid_coarse_ns", "rv_grid_coarse", "as rv_grid_now_ns"),
    ("rv_inbox_cell", "inbox_cell", "WGSL addresses by byte offset; the C name returns a pointer"),
    ("rv_outbox_cell", "outbox_cell", "as inbox_cell"),
    ("rv_k2k_cell_at", "kcell_at", "as inbox_cell"),
    ("rv_state_region", "state_at", "as inbox_cell"),
    ("rv_copy_to_bulk", "copy_to_bulk", "WGSL's takes a source region and offset instead of a pointer"),
    ("rv_forward", "rv_forward_payload", "WGSL forwards the current message's payload; C is handed the bytes"),
];

/// Which source a name or a call is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    C,
    Wgsl,
}

/// Functions one side defines and the other does not: (part, side, names, why).
const ONE_SIDED: &[(&str, Side, &[&str], &str)] = &[
    (
        "view",
        Side::C,
        &["rv_behaviour_known", "rv_dispatch"],
        "WGSL's dispatch switch is generated whole (device/src/backend/wgpu/program.rs)",
    ),
    ("view", Side::C, &["rv_copy_envelope"], "WGSL moves envelopes word by word through private copies"),
    (
        "view",
        Side::C,
        &["rv_mark_work"],
        "the run set is the CPU backend's; WGSL's scan dispatch finds the slots with work",
    ),
    ("view", Side::C, &["rv_attention_summary"], "WGSL computes the summary's offset where it uses it"),
    ("view", Side::C, &["rv_bulk_ref_of", "rv_bulk_ref_set"], "WGSL reads and writes the reference's two words"),
    (
        "view",
        Side::C,
        &["rv_is_pow2", "rv_align_up", "rv_compute_layout", "rv_grid_view_init", "rv_init_local_slot"],
        "the layout is computed and the regions initialised by the host's build of the C code, for every backend",
    ),
    (
        "view",
        Side::Wgsl,
        &["rv_view_load", "cb_at", "keeper_at", "ar_at", "km_at", "cbf"],
        "WGSL has no pointers: areas and records are byte offsets into the region arrays",
    ),
    (
        "view",
        Side::Wgsl,
        &["env_kind", "env_flags", "env_len", "env_word0", "m_kind", "m_flags", "m_len"],
        "an envelope is a private array of words in WGSL: its packed fields are read by these",
    ),
    (
        "view",
        Side::Wgsl,
        &["load_msg_from_s", "load_msg_from_l", "store_reply_to_s", "store_t_to_s", "clear_t"],
        "private copies of envelopes in and out of the regions (C takes pointers)",
    ),
    ("view", Side::Wgsl, &["src_word", "src_word_masked"], "copying from a region at a byte offset, word by word"),
    ("api", Side::C, &["rv_payload", "rv_state"], "C hands behaviours pointers; WGSL has the typed readers below"),
    (
        "api",
        Side::Wgsl,
        &["m_payload_src", "m_bulk_at", "m_payload_off", "m_payload_src_checked"],
        "where the current message's payload lies (C: a pointer from rv_payload)",
    ),
    (
        "api",
        Side::Wgsl,
        &[
            "rv_msg_kind",
            "rv_payload_u32",
            "rv_payload_u64",
            "rv_state_u32",
            "rv_state_set_u32",
            "rv_state_u64",
            "rv_state_set_u64",
            "rv_out_set_u32",
            "rv_out_set_u64",
            "rv_reply_payload",
            "rv_msg_len",
            "rv_msg_u32",
            "rv_msg_u64",
        ],
        "the typed behaviour API WGSL behaviours use instead of pointers",
    ),
    (
        "api",
        Side::Wgsl,
        &["rv_k2k_seq_pos", "rv_k2k_seq_now", "rv_k2k_dif", "rv_k2k_ready"],
        "kernel-to-kernel sequence numbers carry the dispatch's parity in WGSL",
    ),
    ("api", Side::Wgsl, &["rv_address"], "C's rv_address is a macro of rv_behaviour.h"),
    ("actor", Side::Wgsl, &["rv_device_faulted", "rv_slot_idle"], "the scan dispatch's idle check (C: rv_block_run)"),
    ("actor", Side::C, &["rv_record_trace"], "a traced call's device stamps (Device::trace_call): WGSL has no clock"),
    (
        "actor",
        Side::C,
        &["rv_read_step_words"],
        "the step's words and first envelope read in one batch of loads (one PCIe round trip on a GPU); WGSL reads \
         them where it uses them, from device memory",
    ),
    (
        "actor",
        Side::C,
        &["rv_actor_cache_load", "rv_keep_hlc"],
        "the actor's local copies of its control block's fields (C: the control block is across PCIe on a GPU; \
         WGSL's shared region is device memory)",
    ),
    ("block0", Side::C, &["rv_keeper_beat"], "WGSL's block 0 beats inline at the end of its step"),
    (
        "block0",
        Side::Wgsl,
        &["k", "k_set", "load_cmd_from_s", "load_cmd_from_l", "store_cmd_to_l", "clear_cmd"],
        "the current command is a private array of words in WGSL",
    ),
];

/// Calls one side makes in a shared function that the other does not, ignored in that function's comparison:
/// (function, call, why).
const CALL_DIFFERENCES: &[(&str, &str, &str)] = &[
    ("rv_raise_attention", "rv_attention_words", "C's view holds the summary's place (rv_attention_summary)"),
    ("rv_keeper_step", "rv_attention_words", "as rv_raise_attention"),
    (
        "rv_consume_and_finish",
        "rv_stage_publication",
        "C publishes the inbox head with the outbox tail in one 64-bit store where it can; WGSL stores the two in \
         sequence (rv_finish_message), as cheaply",
    ),
    ("rv_payload_len", "rv_bulk_at", "WGSL checks the reference through m_bulk_at (a private copy of the message)"),
    ("rv_forward_payload", "rv_payload_len", "WGSL reads the length of the payload it forwards; C is given it"),
    ("rv_actor_step", "rv_actor_idle", "WGSL checks idleness in its scan dispatch (rv_slot_idle)"),
    (
        "rv_actor_step",
        "rv_k2k_waiting",
        "a WGSL cell published in this dispatch is taken in the next: the step asks for one (rv_k2k_ready)",
    ),
    ("rv_actor_step", "rv_grid_now", "C reads the clock once for the sweep's messages; WGSL's rv_hlc_next reads it"),
    ("rv_keeper_create", "rv_grid_now", "as rv_actor_step"),
    (
        "rv_actor_step",
        "rv_grid_coarse",
        "C's messages take the step's time (milliseconds: a coarse clock but for a traced call's step); WGSL's \
         rv_hlc_next reads the dispatch's",
    ),
];

/// One function definition: its name (C names mapped to their WGSL twins) and its body, comments removed.
#[derive(Debug)]
struct Function {
    name: String,
    body: String,
}

/// `text` with `//` and `/* */` comments replaced by spaces (line structure kept).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |e| e + 2);
            out.extend(after[..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
            out.push_str("  ");
            rest = &after[end..];
        } else if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The index of the bracket closing the one at `open` (`(`/`)` or `{`/`}`).
fn matching(text: &str, open: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let (o, c) = (bytes[open], if bytes[open] == b'(' { b')' } else { b'}' });
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The name of the C function `c` is, in WGSL's words.
fn wgsl_name(c: &str) -> &str {
    SAME_FUNCTION.iter().find(|(name, _, _)| *name == c).map_or(c, |(_, wgsl, _)| wgsl)
}

/// The function definitions of `source`, in order. A definition starts a line: `fn name(` in WGSL,
/// `RV_FN|RV_API|RV_STEP_API ... name(` in C (a declaration, ending in `;` before any `{`, is not one).
fn functions(source: &str, side: Side) -> Vec<Function> {
    let text = without_comments(source);
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let defines = match side {
            Side::C => ["RV_FN ", "RV_API ", "RV_STEP_API "].iter().any(|p| line.starts_with(p)),
            Side::Wgsl => line.starts_with("fn "),
        };
        let Some(paren) = line.find('(').filter(|_| defines) else { continue };
        let name = line[..paren].split(|c: char| !(c.is_alphanumeric() || c == '_')).rfind(|w| !w.is_empty());
        let Some(name) = name else { continue };
        let after = &text[start + paren..];
        let Some(brace) = after.find('{').filter(|&b| after.find(';').is_none_or(|s| b < s)) else { continue };
        let open = start + paren + brace;
        let close = matching(&text, open).unwrap_or(text.len() - 1);
        let name = if side == Side::C { wgsl_name(name) } else { name };
        out.push(Function { name: name.to_string(), body: text[open..=close].to_string() });
    }
    out
}

/// The calls `body` makes to functions in `known` (comments aside), in evaluation order (by the position of each call's closing
/// parenthesis), C names mapped to their WGSL twins.
fn calls(body: &str, known: &BTreeSet<String>) -> Vec<String> {
    let body = &without_defect_switches(&without_comments(body));
    let bytes = body.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if !(c.is_ascii_alphabetic() || c == b'_')
            || (i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            i += 1;
            continue;
        }
        let end = i + bytes[i..].iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
        let word = wgsl_name(&body[i..end]);
        let paren = end + bytes[end..].iter().take_while(|b| b.is_ascii_whitespace()).count();
        if paren < bytes.len() && bytes[paren] == b'(' && known.contains(word) {
            found.push((matching(body, paren).unwrap_or(body.len()), word.to_string()));
        }
        i = end;
    }
    found.sort();
    found.into_iter().map(|(_, w)| w).collect()
}

/// `text` without the statements only the simulator's defect switches run (`if (RV_DEFECT(...)) ...;` on one
/// line, C only: rv_port.h): they put back ordering defects a GPU found, and WGSL has none of them.
fn without_defect_switches(text: &str) -> String {
    text.split_inclusive('\n').map(|l| if l.trim_start().starts_with("if (RV_DEFECT(") { "\n" } else { l }).collect()
}

/// Every way the C and WGSL parts differ that the lists above do not explain.
fn differences(parts: &[(String, String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let sides: Vec<(&str, Vec<Function>, Vec<Function>)> =
        parts.iter().map(|(part, c, w)| (part.as_str(), functions(c, Side::C), functions(w, Side::Wgsl))).collect();
    let names = |f: &[Function]| f.iter().map(|f| f.name.clone()).collect::<BTreeSet<_>>();
    let all_c: BTreeSet<String> = sides.iter().flat_map(|(_, c, _)| names(c)).collect();
    let all_w: BTreeSet<String> = sides.iter().flat_map(|(_, _, w)| names(w)).collect();
    let shared: BTreeSet<String> = all_c.intersection(&all_w).cloned().collect();
    let explained = |part: &str, side: Side, name: &str| {
        ONE_SIDED.iter().any(|(p, s, names, _)| *p == part && *s == side && names.contains(&name))
    };
    for (part, c, w) in &sides {
        let (in_c, in_w) = (names(c), names(w));
        for (side, mine, theirs, label) in [(Side::C, &in_c, &in_w, "C"), (Side::Wgsl, &in_w, &in_c, "WGSL")] {
            for name in mine.difference(theirs).filter(|n| !explained(part, side, n)) {
                problems
                    .push(format!("{part}: `{name}` is defined in {label} only (list it with its reason, or port it)"));
            }
        }
        let spine = |f: &[Function]| {
            f.iter()
                .filter(|f| in_c.contains(&f.name) && in_w.contains(&f.name))
                .map(|f| f.name.clone())
                .collect::<Vec<_>>()
        };
        let (c_spine, w_spine) = (spine(c), spine(w));
        if c_spine != w_spine {
            problems.push(format!(
                "{part}: the shared functions are in a different order\n  C:    {c_spine:?}\n  WGSL: {w_spine:?}"
            ));
        }
        let bodies: BTreeMap<&str, (&str, &str)> = c
            .iter()
            .filter_map(|cf| {
                w.iter()
                    .find(|wf| wf.name == cf.name)
                    .map(|wf| (cf.name.as_str(), (cf.body.as_str(), wf.body.as_str())))
            })
            .collect();
        for (name, (c_body, w_body)) in bodies {
            let ignored =
                |call: &String| CALL_DIFFERENCES.iter().any(|(f, c, _)| *f == name && c == call) || call == name;
            let c_calls: Vec<String> = calls(c_body, &shared).into_iter().filter(|c| !ignored(c)).collect();
            let w_calls: Vec<String> = calls(w_body, &shared).into_iter().filter(|c| !ignored(c)).collect();
            if c_calls != w_calls {
                problems.push(format!("{part}: `{name}` calls differently\n  C:    {c_calls:?}\n  WGSL: {w_calls:?}"));
            }
        }
    }
    problems
}

/// Every part as (stem, C source, WGSL source), in the order `kernels/rv_protocol.cu` includes them.
fn sources() -> Vec<(String, String, String)> {
    protocol_parts::parts().into_iter().map(|p| (p.stem, p.c, p.wgsl)).collect()
}

/// The part named `stem` of `parts`.
fn part<'a>(parts: &'a mut [(String, String, String)], stem: &str) -> &'a mut (String, String, String) {
    parts.iter_mut().find(|p| p.0 == stem).expect("a part of the protocol")
}

#[test]
fn the_c_and_wgsl_protocols_define_and_call_the_same_functions_in_the_same_order() {
    let problems = differences(&sources());
    assert!(problems.is_empty(), "the two protocol sources differ:\n{}", problems.join("\n"));
    let counted: usize = sources().iter().map(|(_, c, _)| functions(c, Side::C).len()).sum();
    assert!(counted >= 60, "the C parser found only {counted} functions");
}

#[test]
fn every_allowance_is_still_needed() {
    let parts = sources();
    let defined: Vec<(&str, Side, String)> = parts
        .iter()
        .flat_map(|(part, c, w)| {
            let part = part.as_str();
            let c = functions(c, Side::C).into_iter().map(move |f| (part, Side::C, f.name));
            c.chain(functions(w, Side::Wgsl).into_iter().map(move |f| (part, Side::Wgsl, f.name)))
        })
        .collect();
    for (part, side, names, _) in ONE_SIDED {
        for name in *names {
            assert!(
                defined.iter().any(|(p, s, n)| p == part && s == side && n == name),
                "{part}/{side:?}: `{name}` is not defined"
            );
            let other = if *side == Side::C { Side::Wgsl } else { Side::C };
            assert!(!defined.iter().any(|(_, s, n)| *s == other && n == name), "`{name}` exists on both sides now");
        }
    }
    for (function, call, _) in CALL_DIFFERENCES {
        assert!(defined.iter().any(|(_, _, n)| n == function), "`{function}` is not defined");
        assert!(defined.iter().any(|(_, _, n)| n == call), "`{call}` is not defined");
    }
}

/// `text` with the first occurrences of `a` and `b` after `within` swapped.
fn swap_after(text: &str, within: &str, a: &str, b: &str) -> String {
    let base = text.find(within).expect("anchor");
    let ia = base + text[base..].find(a).expect("a");
    let ib = base + text[base..].find(b).expect("b");
    let (first, second, fa, fb) = if ia < ib { (ia, ib, a, b) } else { (ib, ia, b, a) };
    format!("{}{fb}{}{fa}{}", &text[..first], &text[first + fa.len()..second], &text[second + fb.len()..])
}

#[test]
fn a_check_reordered_in_one_source_is_found() {
    let mut parts = sources();
    // block 0 validates a create's init before its slot index in both sources; swap the two checks in C only
    let block0 = part(&mut parts, "block0");
    block0.1 = swap_after(&block0.1, "rv_keeper_execute(", "rv_init_valid(", "rv_index_near(");
    let problems = differences(&parts);
    assert!(problems.iter().any(|p| p.contains("`rv_keeper_execute` calls differently")), "{problems:?}");
}

#[test]
fn a_function_moved_in_one_source_or_defined_on_one_side_only_is_found() {
    let mut parts = sources();
    // move rv_outbox_has_room after rv_envelope_valid in the WGSL actor part
    let w = &part(&mut parts, "actor").2;
    let start = w.find("fn rv_outbox_has_room(").expect("defined");
    let end = start + w[start..].find("\n}\n").expect("ends") + 3;
    let moved = w[start..end].to_string();
    let rest = format!("{}{}", &w[..start], &w[end..]);
    let at = rest.find("fn rv_state_read_len(").expect("defined");
    part(&mut parts, "actor").2 = format!("{}{moved}{}", &rest[..at], &rest[at..]);
    part(&mut parts, "api").1.push_str("\nRV_FN int rv_new_check(const rv_grid_view *g) { return 0; }\n");
    let problems = differences(&parts);
    assert!(
        problems.iter().any(|p| p.starts_with("actor: the shared functions are in a different order")),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p.contains("`rv_new_check` is defined in C only")), "{problems:?}");
}

#[test]
fn calls_are_in_evaluation_order_and_comments_do_not_count() {
    let known: BTreeSet<String> = ["f", "g", "h"].iter().map(|s| s.to_string()).collect();
    assert_eq!(calls("{ f(g(1), h (2)); /* f() */ // g()\n }", &known), ["g", "h", "f"]);
    let switched = "{\n    if (RV_DEFECT(RV_X)) g(1);\n    if (!RV_DEFECT(RV_X)) h(2);\n    f(3);\n}";
    assert_eq!(calls(switched, &known), ["h", "f"], "a defect's own statement is not the protocol's");
    let c = "RV_FN int f(int x);\nRV_FN int f(int x) {\n    return g(x);\n}\nRV_API void *h(void) { return 0; }\n";
    let found = functions(c, Side::C);
    assert_eq!(
        found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["f", "h"],
        "a declaration is not a definition"
    );
}
