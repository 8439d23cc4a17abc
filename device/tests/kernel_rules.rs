//! Rules the device code keeps that no compiler checks, read from its source: on a GPU the SHARED region is
//! host memory across PCIe and the LOCAL region is device memory, so
//! - system-scope accesses (`rv_load_acquire_u32`, `rv_store_release_u32`, ... : ordered against the host,
//!   each a PCIe-visible access) are for the shared region only, and the local region's fields (kernel-to-kernel
//!   rings, attention bitmap, local header) use the device-scope variants (`..._dev_u32`);
//! - nothing in the protocol copies or zeroes the shared region byte by byte (each byte would be its own PCIe
//!   transaction): envelopes, commands and events move with 16-byte accesses (`rv_copy16`, `rv_copy_envelope`).

mod protocol_parts;

/// The protocol's parts, as (file, source).
fn protocol() -> Vec<(String, String)> {
    protocol_parts::parts().into_iter().map(|p| (p.c_file, p.c)).collect()
}

const ENTRY: &str = include_str!("../../kernels/rv_entry.cu");

/// Expressions naming LOCAL-region fields.
const LOCAL_FIELDS: &[&str] =
    &["meta->", "cell->", "attention[", "local_header->", "g->keepers[", "rec->", "ar->", "g->actors["];

/// Calls of the system-scope single-field helpers: (line number, argument text).
fn sys_scope_calls(source: &str) -> Vec<(usize, String)> {
    let helpers = ["load_acquire_u", "store_release_u", "load_relaxed_u", "store_relaxed_u"];
    let mut out = Vec::new();
    for (n, line) in source.lines().enumerate() {
        for h in helpers {
            let mut rest = line;
            while let Some(i) = rest.find(&format!("rv_{h}")) {
                let after = &rest[i..];
                let open = after.find('(').map_or(after.len(), |p| p + 1);
                let arg: String = after[open..].chars().take_while(|&c| c != ',' && c != ')').collect();
                out.push((n + 1, arg));
                rest = &after[open..];
            }
        }
    }
    out
}

#[test]
fn system_scope_is_only_used_on_the_shared_region() {
    let mut wrong = Vec::new();
    let protocol = protocol();
    let protocol_calls: usize = protocol.iter().map(|(_, source)| sys_scope_calls(source).len()).sum();
    assert!(protocol_calls >= 40, "the protocol: the scan found only {protocol_calls} calls");
    let entry = ("rv_entry.cu".to_string(), ENTRY.to_string());
    for (file, source) in protocol.iter().chain([&entry]) {
        let calls = sys_scope_calls(source);
        assert!(!calls.is_empty() || file.ends_with("view.cu"), "{file}: the scan found no call");
        for (line, arg) in calls {
            if LOCAL_FIELDS.iter().any(|f| arg.contains(f)) {
                wrong.push(format!("{file}:{line}: system scope on a local-region field: {arg}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_scan_finds_a_planted_system_scope_access_to_the_local_region() {
    let planted = "    uint32_t x = rv_load_acquire_u32(&cell->seq);\n";
    let calls = sys_scope_calls(planted);
    assert_eq!(calls, vec![(1, "&cell->seq".to_string())]);
    assert!(LOCAL_FIELDS.iter().any(|f| calls[0].1.contains(f)));
}

#[test]
fn the_protocol_moves_envelopes_commands_and_events_16_bytes_at_a_time() {
    // Byte-wise copies are only for payload bytes into a stack copy or a local-region cell, and for building
    // the header on the host.
    let protocol = protocol();
    let lines = protocol.iter().flat_map(|(file, source)| source.lines().enumerate().map(move |(n, l)| (file, n, l)));
    for (file, n, line) in lines {
        let line = line.trim();
        if line.contains("rv_copy_bytes(") || line.contains("rv_zero_bytes(") {
            let allowed = [
                "e->payload",
                "e.payload",
                "init.payload",
                "rv_zero_bytes(h, sizeof(rv_grid_header))",
                "&init",
                "&bogus",
            ];
            assert!(allowed.iter().any(|a| line.contains(a)), "{file}:{}: byte-wise: {line}", n + 1);
        }
    }
    for needle in [
        // what the host wrote is read with 16-byte loads, after the acquire of the index that published it
        "rv_copy16_from_host(&copy, rv_inbox_cell(",
        "rv_copy_envelope(rv_outbox_cell(ctx->g, ctx->slot, publish), &ctx->reply)",
        // a routed send, built on the stack, goes into the outbox whole
        "rv_copy_envelope(rv_outbox_cell(g, ctx->slot, tail), &e)",
        "rv_copy16(&g->events[",
        "rv_copy16_from_host(&cmd, &g->commands[",
        // large payloads go into the bulk areas 16 bytes at a time too
        "rv_copy_to_bulk(g->outbox_bulk + ",
        "rv_copy_to_bulk(g->k2k_bulk + ",
    ] {
        assert!(protocol.iter().any(|(_, source)| source.contains(needle)), "missing: {needle}");
    }
}
