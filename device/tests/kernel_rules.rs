//! Rules the device code keeps that no compiler checks, read from its source: on a GPU the SHARED region is
//! host memory across PCIe and the LOCAL region is device memory, so
//! - system-scope accesses (`rv_load_acquire_u32`, `rv_store_release_u32`, ... : ordered against the host,
//!   each a PCIe-visible access) are for the shared region only, and the local region's fields (kernel-to-kernel
//!   rings, attention bitmap, local header) use the device-scope variants (`..._dev_u32`);
//! - nothing in the protocol copies or zeroes the shared region byte by byte (each byte would be its own PCIe
//!   transaction): envelopes, commands and events move with 16-byte accesses (`rv_copy16`, `rv_copy_envelope`).

const PROTOCOL: &str = include_str!("../../kernels/rv_protocol.cu");
const ENTRY: &str = include_str!("../../kernels/rv_entry.cu");

/// Expressions naming LOCAL-region fields.
const LOCAL_FIELDS: &[&str] =
    &["meta->", "cell->", "attention[", "local_header->", "g->sv[", "rec->", "ar->", "g->actors["];

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
    for (file, source, at_least) in [("rv_protocol.cu", PROTOCOL, 40), ("rv_entry.cu", ENTRY, 3)] {
        let calls = sys_scope_calls(source);
        assert!(calls.len() >= at_least, "{file}: the scan found only {} calls", calls.len());
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
    for (n, line) in PROTOCOL.lines().enumerate() {
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
            assert!(allowed.iter().any(|a| line.contains(a)), "rv_protocol.cu:{}: byte-wise: {line}", n + 1);
        }
    }
    for needle in [
        // what the host wrote is read with volatile 16-byte loads (never a cache line of the cell's last lap)
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
        assert!(PROTOCOL.contains(needle), "missing: {needle}");
    }
}
