//! The Rust mirror in `device/src/layout.rs` agrees with `kernels/rv_layout.h` on every struct size and
//! alignment, every field offset and size, and every protocol constant, as the C compiler reports them
//! (`rv_layout_report`, compiled from `kernels/host/rv_layout_report.inc`).

use ringvisor_device::ffi::rv_layout_report;
use ringvisor_device::layout::*;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::mem::{align_of, offset_of, size_of};

macro_rules! field_size {
    ($t:ty, $f:ident) => {{
        fn size_of_field<T, F>(_: impl Fn(&T) -> &F) -> usize {
            size_of::<F>()
        }
        size_of_field(|s: &$t| &s.$f)
    }};
}

macro_rules! fields {
    ($map:ident, $cname:literal, $t:ty, [$($f:ident),* $(,)?]) => {{
        $map.insert(format!("sizeof {}", $cname), (size_of::<$t>() as u64, align_of::<$t>() as u64));
        $(
            $map.insert(format!("{}.{}", $cname, stringify!($f)), (offset_of!($t, $f) as u64, field_size!($t, $f) as u64));
        )*
    }};
}

macro_rules! consts {
    ($map:ident, [$($c:ident),* $(,)?]) => {{
        $( $map.insert(stringify!($c).to_string(), ($c as i64 as u64, 0)); )*
    }};
}

fn rust_view() -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    fields!(
        m,
        "rv_envelope",
        RawEnvelope,
        [kind, flags, payload_len, source, destination, generation, correlation, hlc, payload]
    );
    fields!(m, "rv_error_payload", RawErrorPayload, [code, detail]);
    fields!(
        m,
        "rv_control_block",
        RawControlBlock,
        [
            state,
            generation,
            heartbeat,
            messages_processed,
            last_error,
            behaviour,
            hlc,
            failed_index,
            request_ack,
            k2k_sent,
            k2k_received,
            k2k_dropped,
            bad_envelopes,
            host_pending_op,
            host_flags,
            fault_flags,
            fault_seq,
            fault_arg,
            restart_grant,
            host_reserved,
            inbox_head,
            outbox_tail,
            request,
            request_seq,
            drain_until,
            fault_ack,
            stall_until_ns,
            grant_floor,
            grant_floor_gen,
            device_reserved,
            inbox_tail,
            outbox_head,
            host_seq,
            outbox_bulk_head,
            host_index_reserved,
        ]
    );
    fields!(
        m,
        "rv_command",
        RawCommand,
        [op, slot, expected_generation, behaviour, cmd_id, inbox_index, init_len, init]
    );
    fields!(
        m,
        "rv_event",
        RawEvent,
        [
            kind,
            slot,
            generation,
            state,
            code,
            inbox_head,
            failed_index,
            k2k_dropped,
            cmd_id,
            time_ns,
            messages_processed,
            op,
            inbox_start,
        ]
    );
    fields!(
        m,
        "rv_grid_header",
        RawGridHeader,
        [
            magic,
            version,
            slot_count,
            inbox_capacity,
            outbox_capacity,
            k2k_capacity,
            command_capacity,
            event_capacity,
            state_bytes,
            payload_bytes,
            shared_bytes,
            local_bytes,
            off_blocks,
            off_commands,
            off_events,
            off_inboxes,
            off_outboxes,
            off_keeper_records,
            off_attention,
            off_k2k_meta,
            off_k2k_cells,
            off_state,
            clock_offset_ns,
            off_actor_records,
            off_doorbells,
            bulk_bytes,
            bulk_reserved,
            off_inbox_bulk,
            off_outbox_bulk,
            off_k2k_bulk,
            terminate,
            device_faults,
            trace_armed,
            host_reserved,
            keeper_heartbeat,
            commands_processed,
            events_published,
            blocks_started,
            trace_slot,
            trace_ns,
            command_tail,
            pad4,
            command_head,
            pad5,
            event_tail,
            pad6,
            event_head,
            pad7,
        ]
    );
    fields!(m, "rv_local_header", RawLocalHeader, [blocks_started, pause_acks, keeper_beats, reserved]);
    fields!(
        m,
        "rv_keeper_record",
        RawKeeperRecord,
        [
            pending_op,
            reported_state,
            device_seq,
            init_event,
            init_old_head,
            init_old_failed,
            init_dropped,
            init_result,
            init_old_processed,
            reserved,
            pending,
            start
        ]
    );
    fields!(
        m,
        "rv_actor_record",
        RawActorRecord,
        [
            seen_host_seq,
            seen_device_seq,
            quiet,
            outbox_bulk_tail,
            beats,
            next_beat_ns,
            checked_device_seq,
            inbox_head,
            outbox_tail,
            outbox_head_seen,
            behaviour,
            generation,
            messages_processed,
            hlc,
            stall_until_ns,
            reserved
        ]
    );
    fields!(m, "rv_k2k_meta", RawK2kMeta, [tail, bulk_lock, bulk_tail, pad0, head, bulk_head, pad1]);
    fields!(m, "rv_bulk_ref", RawBulkRef, [end, len]);
    fields!(m, "rv_k2k_cell", RawK2kCell, [seq, reserved, env]);
    fields!(
        m,
        "rv_grid_params",
        RawGridParams,
        [
            slot_count,
            inbox_capacity,
            outbox_capacity,
            k2k_capacity,
            command_capacity,
            event_capacity,
            state_bytes,
            bulk_bytes
        ]
    );
    consts!(
        m,
        [
            RV_MAGIC,
            RV_PROTOCOL_VERSION,
            RV_PAYLOAD_BYTES,
            RV_INIT_BYTES,
            RV_MAX_BEHAVIOURS,
            RV_NO_INDEX,
            RV_HOST_ENDPOINT,
            RV_MAX_SENDS_PER_MESSAGE,
            RV_ROUTED_BIT,
            RV_ROUTED_DEVICE_SHIFT,
            RV_ROUTED_SLOT_MASK,
            RV_MAX_ROUTED_DEVICES,
            RV_COMMANDS_PER_STEP,
            RV_GRANTED_CMD,
            RV_IDLE_BEAT_NS,
            RV_QUIET_NO,
            RV_QUIET_STOPPED,
            RV_QUIET_ACTIVE,
            RV_STATE_DORMANT,
            RV_STATE_INITIALIZING,
            RV_STATE_ACTIVE,
            RV_STATE_DRAINING,
            RV_STATE_TERMINATED,
            RV_STATE_FAILED,
            RV_OP_NONE,
            RV_OP_CREATE,
            RV_OP_KILL,
            RV_OP_RESTART,
            RV_OP_DRAIN,
            RV_OP_RESUME,
            RV_OP_INIT,
            RV_EVT_CREATED,
            RV_EVT_CREATE_FAILED,
            RV_EVT_KILLED,
            RV_EVT_RESTARTED,
            RV_EVT_DRAINING,
            RV_EVT_DRAINED,
            RV_EVT_RESUMED,
            RV_EVT_FAILED,
            RV_EVT_REJECTED,
            RV_KIND_USER,
            RV_KIND_REPLY,
            RV_KIND_INIT,
            RV_KIND_K2K,
            RV_KIND_ERROR,
            RV_KIND_VOID,
            RV_KIND_STATE,
            RV_FLAG_NO_REPLY,
            RV_FLAG_BULK,
            RV_FLAG_TRACE,
            RV_MAX_BULK_BYTES,
            RV_FAULT_CRASH_NEXT,
            RV_FAULT_STALL,
            RV_FAULT_CORRUPT_NEXT,
            RV_FAULT_WEDGE,
            RV_DEVICE_STALL,
            RV_DEVICE_HALT,
            RV_TERMINATE_LEAVE,
            RV_TERMINATE_PAUSE,
            RV_FLOOR_STOP,
            RV_OK,
            RV_STALL,
            RV_ERR_SLOT_RANGE,
            RV_ERR_UNKNOWN_BEHAVIOUR,
            RV_ERR_ILLEGAL_TRANSITION,
            RV_ERR_STALE_GENERATION,
            RV_ERR_BUSY,
            RV_ERR_BAD_COMMAND,
            RV_ERR_BAD_ENVELOPE,
            RV_ERR_PAYLOAD_TOO_LARGE,
            RV_ERR_LIMIT,
            RV_ERR_K2K_FULL,
            RV_ERR_NOT_ALLOWED,
            RV_ERR_INJECTED,
            RV_ERR_POISON,
            RV_ERR_TARGET_GONE,
            RV_ERR_OUTBOX_FULL,
            RV_ERR_USER_BASE,
            RV_STEP_PROGRESS,
            RV_STEP_REPLIED,
            RV_STEP_ATTENTION,
        ]
    );
    m
}

fn c_view() -> BTreeMap<String, (u64, u64)> {
    let mut count = 0u32;
    // SAFETY: rv_layout_report returns a pointer to a static array of `count` entries with static names.
    let entries = unsafe { std::slice::from_raw_parts(rv_layout_report(&mut count), count as usize) };
    entries
        .iter()
        // SAFETY: each name is a NUL-terminated string literal.
        .map(|e| (unsafe { CStr::from_ptr(e.name) }.to_string_lossy().into_owned(), (e.value, e.extra)))
        .collect()
}

#[test]
fn rust_and_c_agree_on_every_size_offset_and_constant() {
    let c = c_view();
    let rust = rust_view();
    assert!(c.len() > 150, "the C report looks truncated: {} entries", c.len());
    let mut problems = Vec::new();
    for (name, cv) in &c {
        match rust.get(name) {
            Some(rv) if rv == cv => {}
            Some(rv) => problems.push(format!("{name}: C says {cv:?}, Rust says {rv:?}")),
            None => problems.push(format!("{name}: reported by C, not checked on the Rust side")),
        }
    }
    for name in rust.keys() {
        if !c.contains_key(name) {
            problems.push(format!("{name}: checked on the Rust side, not reported by C"));
        }
    }
    assert!(problems.is_empty(), "layout drift between kernels/ and device/src/layout.rs:\n{}", problems.join("\n"));
}

#[test]
fn control_block_lines_are_grouped_by_writer() {
    // line 0: device lifecycle; line 1: host; line 2: device indices; line 3: host indices
    let line = |off: usize| off / 64;
    assert_eq!(line(offset_of!(RawControlBlock, bad_envelopes)), 0);
    assert_eq!(line(offset_of!(RawControlBlock, fault_arg)), 1);
    assert_eq!(line(offset_of!(RawControlBlock, stall_until_ns)), 2);
    assert_eq!(line(offset_of!(RawControlBlock, inbox_tail)), 3);
    assert_ne!(line(offset_of!(RawControlBlock, inbox_head)), line(offset_of!(RawControlBlock, inbox_tail)));
    assert_ne!(line(offset_of!(RawControlBlock, outbox_head)), line(offset_of!(RawControlBlock, outbox_tail)));
}

/// The tables of docs/protocol.md ("Layout, byte by byte"), as the report says they should read.
fn protocol_doc_tables(c: &BTreeMap<String, (u64, u64)>) -> String {
    let mut out = String::new();
    for (name, (size, align)) in c.iter().filter(|(n, _)| n.starts_with("sizeof ")) {
        let ty = name.trim_start_matches("sizeof ");
        out.push_str(&format!(
            "### `{ty}` ({size} bytes, {align}-byte aligned)\n\n| offset | size | field |\n|---:|---:|---|\n"
        ));
        let mut fields: Vec<(u64, u64, &str)> =
            c.iter().filter_map(|(n, (off, sz))| n.strip_prefix(&format!("{ty}.")).map(|f| (*off, *sz, f))).collect();
        fields.sort();
        for (off, sz, f) in fields {
            out.push_str(&format!("| {off} | {sz} | `{f}` |\n"));
        }
        out.push('\n');
    }
    out
}

#[test]
fn protocol_doc_tables_are_the_c_layout() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let expected = protocol_doc_tables(&c_view());
    let mut wrong = Vec::new();
    for table in expected.split("### ").filter(|t| !t.is_empty()) {
        let table = format!("### {}", table.trim_end());
        if !doc.contains(&table) {
            wrong.push(table);
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/protocol.md's layout tables differ from the C layout; they should read:\n\n{}",
        wrong.join("\n\n")
    );
}
