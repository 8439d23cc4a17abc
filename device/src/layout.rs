//! The Rust mirror of `kernels/rv_layout.h`: every structure shared with the persistent kernel.
//!
//! `kernels/` is the single source of truth. This file repeats it so the host can address the shared regions;
//! each struct carries compile-time size and offset asserts, and `device/tests/layout.rs` compares every field
//! offset, field size, struct size and constant with what the C compiler reports (`rv_layout_report`), so any
//! drift fails the build or the tests.
//!
//! These structs are never read or written as a whole across the host/device boundary: the host touches one
//! field at a time through `crate::shared`, with acquire/release atomics where the field is shared.
//! Field and constant meanings are documented once, in the C header.
#![allow(missing_docs)]

use core::mem::{align_of, offset_of, size_of};

/// Magic number at the start of the grid header ("RGVR").
pub const RV_MAGIC: u32 = 0x5256_4752;
/// Version of the shared layout and protocol.
pub const RV_PROTOCOL_VERSION: u32 = 6;
/// Payload bytes in one envelope.
pub const RV_PAYLOAD_BYTES: u32 = 96;
/// Init bytes carried by a Create / Restart command.
pub const RV_INIT_BYTES: u32 = 96;
/// Size of the behaviour id space.
pub const RV_MAX_BEHAVIOURS: u32 = 256;
/// "No index" marker (for example: no message was being processed at failure).
pub const RV_NO_INDEX: u32 = 0xFFFF_FFFF;
/// Endpoint id of the host in envelope source/destination fields.
pub const RV_HOST_ENDPOINT: u32 = 0xFFFF_FFFF;
/// Most kernel-to-kernel sends one message may stage.
pub const RV_MAX_SENDS_PER_MESSAGE: u32 = 4;
/// Set in a routed kernel-to-kernel address (an actor on a device of the runtime, reached through the host).
pub const RV_ROUTED_BIT: u32 = 0x8000_0000;
/// Where a routed address's device index starts.
pub const RV_ROUTED_DEVICE_SHIFT: u32 = 24;
/// A routed address's slot bits.
pub const RV_ROUTED_SLOT_MASK: u32 = 0x00FF_FFFF;
/// Devices a routed address can name (indices below this).
pub const RV_MAX_ROUTED_DEVICES: u32 = 127;
/// Most commands block 0 carries out in one step (its heartbeat moves after each).
pub const RV_COMMANDS_PER_STEP: u32 = 64;
/// The cmd_id bit of a restart block 0 carried out under the host's grant (slot in bits 32-62, the new
/// generation in bits 0-31).
pub const RV_GRANTED_CMD: u64 = 1 << 63;
/// An idle Active actor's heartbeat interval.
pub const RV_IDLE_BEAT_NS: u64 = 1_000_000;
/// `rv_actor_record.quiet`: the next step is a full one.
pub const RV_QUIET_NO: u32 = 0;
/// `rv_actor_record.quiet`: idle and not running.
pub const RV_QUIET_STOPPED: u32 = 1;
/// `rv_actor_record.quiet`: idle and Active (beats at the idle rate).
pub const RV_QUIET_ACTIVE: u32 = 2;

/// Slot lifecycle states.
pub const RV_STATE_DORMANT: u32 = 0;
pub const RV_STATE_INITIALIZING: u32 = 1;
pub const RV_STATE_ACTIVE: u32 = 2;
pub const RV_STATE_DRAINING: u32 = 3;
pub const RV_STATE_TERMINATED: u32 = 4;
pub const RV_STATE_FAILED: u32 = 5;

/// Command opcodes (host to block 0).
pub const RV_OP_NONE: u32 = 0;
pub const RV_OP_CREATE: u32 = 1;
pub const RV_OP_KILL: u32 = 2;
pub const RV_OP_RESTART: u32 = 3;
pub const RV_OP_DRAIN: u32 = 4;
pub const RV_OP_RESUME: u32 = 5;
/// Block 0's record only: a creation waits for the actor's block to run the behaviour's init.
pub const RV_OP_INIT: u32 = 6;

/// Event kinds (block 0 to host).
pub const RV_EVT_CREATED: u32 = 1;
pub const RV_EVT_CREATE_FAILED: u32 = 2;
pub const RV_EVT_KILLED: u32 = 3;
pub const RV_EVT_RESTARTED: u32 = 4;
pub const RV_EVT_DRAINING: u32 = 5;
pub const RV_EVT_DRAINED: u32 = 6;
pub const RV_EVT_RESUMED: u32 = 7;
pub const RV_EVT_FAILED: u32 = 8;
pub const RV_EVT_REJECTED: u32 = 9;

/// Envelope kinds.
pub const RV_KIND_USER: u32 = 1;
pub const RV_KIND_REPLY: u32 = 2;
pub const RV_KIND_INIT: u32 = 3;
pub const RV_KIND_K2K: u32 = 4;
pub const RV_KIND_ERROR: u32 = 5;
pub const RV_KIND_VOID: u32 = 6;
/// Envelope kind: host to actor, answered with a copy of the actor's state (the behaviour does not run).
pub const RV_KIND_STATE: u32 = 7;
/// Envelope flag: the sender wants no reply.
pub const RV_FLAG_NO_REPLY: u32 = 1;
/// Envelope flag: the payload lies in a bulk area; the envelope's payload is an [`RawBulkRef`].
pub const RV_FLAG_BULK: u32 = 2;
/// Envelope flag: traced ([`Device::trace_call`](crate::Device::trace_call)); the actor stamps the grid
/// header's `trace_ns`.
pub const RV_FLAG_TRACE: u32 = 4;
/// Most bytes a slot's bulk area may have.
pub const RV_MAX_BULK_BYTES: u32 = 1 << 24;

/// Fault-injection bit: fail on the next message.
pub const RV_FAULT_CRASH_NEXT: u32 = 1;
/// Fault-injection bit: make no progress while set.
pub const RV_FAULT_STALL: u32 = 2;
/// Fault-injection bit: treat the next host message as a corrupt envelope (answered with an error).
pub const RV_FAULT_CORRUPT_NEXT: u32 = 4;
/// Fault-injection bit: stuck inside the behaviour (no progress, no heartbeat, requests never acknowledged).
pub const RV_FAULT_WEDGE: u32 = 8;
/// Device-wide fault bit: no block makes progress while set.
pub const RV_DEVICE_STALL: u32 = 1;
/// Device-wide fault bit: the persistent kernel stops for good.
pub const RV_DEVICE_HALT: u32 = 2;
/// The grid header's `terminate`: every block leaves its loop for good.
pub const RV_TERMINATE_LEAVE: u32 = 1;
/// The grid header's `terminate`: every block leaves; the host relaunches the kernel later (its memory kept).
pub const RV_TERMINATE_PAUSE: u32 = 2;
/// The floor probe's request that stops its answering thread early.
pub const RV_FLOOR_STOP: u32 = 0xFFFF_FFFF;

/// Result codes shared with the device.
pub const RV_OK: i32 = 0;
pub const RV_STALL: i32 = -1;
pub const RV_ERR_SLOT_RANGE: i32 = 1;
pub const RV_ERR_UNKNOWN_BEHAVIOUR: i32 = 2;
pub const RV_ERR_ILLEGAL_TRANSITION: i32 = 3;
pub const RV_ERR_STALE_GENERATION: i32 = 4;
pub const RV_ERR_BUSY: i32 = 5;
pub const RV_ERR_BAD_COMMAND: i32 = 6;
pub const RV_ERR_BAD_ENVELOPE: i32 = 7;
pub const RV_ERR_PAYLOAD_TOO_LARGE: i32 = 8;
pub const RV_ERR_LIMIT: i32 = 9;
pub const RV_ERR_K2K_FULL: i32 = 10;
pub const RV_ERR_NOT_ALLOWED: i32 = 11;
pub const RV_ERR_INJECTED: i32 = 12;
pub const RV_ERR_POISON: i32 = 13;
pub const RV_ERR_TARGET_GONE: i32 = 14;
/// No room in the outbox's bulk area for a large reply now.
pub const RV_ERR_OUTBOX_FULL: i32 = 15;
pub const RV_ERR_USER_BASE: i32 = 1000;

/// Step result bits.
pub const RV_STEP_PROGRESS: u32 = 1;
pub const RV_STEP_REPLIED: u32 = 2;
pub const RV_STEP_ATTENTION: u32 = 4;

/// `rv_envelope`: 128 bytes, a 32-byte header and a 96-byte payload.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct RawEnvelope {
    pub kind: u8,
    pub flags: u8,
    pub payload_len: u16,
    pub source: u32,
    pub destination: u32,
    pub generation: u32,
    pub correlation: u64,
    pub hlc: u64,
    pub payload: [u8; RV_PAYLOAD_BYTES as usize],
}

/// `rv_error_payload`: the payload of an `RV_KIND_ERROR` envelope.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawErrorPayload {
    pub code: i32,
    pub detail: u32,
}

/// `rv_control_block`: 256 bytes, four cache lines grouped by writer.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawControlBlock {
    // line 0: device-written lifecycle and counters
    pub state: u32,
    pub generation: u32,
    pub heartbeat: u64,
    pub messages_processed: u64,
    pub last_error: i32,
    pub behaviour: u32,
    pub hlc: u64,
    pub failed_index: u32,
    pub request_ack: u32,
    pub k2k_sent: u32,
    pub k2k_received: u32,
    pub k2k_dropped: u32,
    pub bad_envelopes: u32,
    // line 1: host-written
    pub host_pending_op: u32,
    pub host_flags: u32,
    pub fault_flags: u32,
    pub fault_seq: u32,
    pub fault_arg: u64,
    pub restart_grant: u32,
    pub host_reserved: [u8; 36],
    // line 2: device-written indices and block 0's requests
    pub inbox_head: u32,
    pub outbox_tail: u32,
    pub request: u32,
    pub request_seq: u32,
    pub drain_until: u32,
    pub fault_ack: u32,
    pub stall_until_ns: u64,
    pub grant_floor: u32,
    pub grant_floor_gen: u32,
    pub device_reserved: [u8; 24],
    // line 3: host-written indices
    pub inbox_tail: u32,
    pub host_seq: u32,
    pub outbox_head: u32,
    pub outbox_bulk_head: u32,
    pub host_index_reserved: [u8; 48],
}

/// `rv_command`: one record of the command ring (host to block 0).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct RawCommand {
    pub op: u32,
    pub slot: u32,
    pub expected_generation: u32,
    pub behaviour: u32,
    pub cmd_id: u64,
    pub inbox_index: u32,
    pub init_len: u32,
    pub init: [u8; RV_INIT_BYTES as usize],
}

/// `rv_event`: one record of the event ring (block 0 to host).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
pub struct RawEvent {
    pub kind: u32,
    pub slot: u32,
    pub generation: u32,
    pub state: u32,
    pub code: i32,
    pub inbox_head: u32,
    pub failed_index: u32,
    pub k2k_dropped: u32,
    pub cmd_id: u64,
    pub time_ns: u64,
    pub messages_processed: u64,
    pub op: u32,
    pub inbox_start: u32,
}

/// `rv_grid_header`: 576 bytes at the start of the shared region.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawGridHeader {
    pub magic: u32,
    pub version: u32,
    pub slot_count: u32,
    pub inbox_capacity: u32,
    pub outbox_capacity: u32,
    pub k2k_capacity: u32,
    pub command_capacity: u32,
    pub event_capacity: u32,
    pub state_bytes: u32,
    pub payload_bytes: u32,
    pub shared_bytes: u64,
    pub local_bytes: u64,
    pub off_blocks: u64,
    pub off_commands: u64,
    pub off_events: u64,
    pub off_inboxes: u64,
    pub off_outboxes: u64,
    pub off_keeper_records: u64,
    pub off_attention: u64,
    pub off_k2k_meta: u64,
    pub off_k2k_cells: u64,
    pub off_state: u64,
    pub clock_offset_ns: i64,
    pub off_actor_records: u64,
    pub off_doorbells: u64,
    pub bulk_bytes: u32,
    pub bulk_reserved: u32,
    pub off_inbox_bulk: u64,
    pub off_outbox_bulk: u64,
    pub off_k2k_bulk: u64,
    pub terminate: u32,
    pub device_faults: u32,
    pub trace_armed: u32,
    pub host_reserved: [u8; 52],
    pub keeper_heartbeat: u64,
    pub commands_processed: u64,
    pub events_published: u64,
    pub blocks_started: u32,
    pub trace_slot: u32,
    pub trace_ns: [u64; 4],
    pub command_tail: u32,
    pub pad4: [u8; 60],
    pub command_head: u32,
    pub pad5: [u8; 60],
    pub event_tail: u32,
    pub pad6: [u8; 60],
    pub event_head: u32,
    pub pad7: [u8; 60],
}

/// `rv_local_header`: the first 64 bytes of the local region.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawLocalHeader {
    pub blocks_started: u32,
    pub pause_acks: u32,
    pub keeper_beats: u64,
    pub reserved: [u8; 48],
}

/// `rv_actor_record`: the actor's own record of a slot (local region).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawActorRecord {
    pub seen_host_seq: u32,
    pub seen_device_seq: u32,
    pub quiet: u32,
    pub outbox_bulk_tail: u32,
    pub beats: u64,
    pub next_beat_ns: u64,
    pub checked_device_seq: u32,
    pub inbox_head: u32,
    pub outbox_tail: u32,
    pub outbox_head_seen: u32,
    pub behaviour: u32,
    pub generation: u32,
    pub messages_processed: u64,
    pub hlc: u64,
    pub stall_until_ns: u64,
    pub reserved: [u8; 48],
}

/// `rv_keeper_record`: block 0's private record of a slot (local region).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawKeeperRecord {
    pub pending_op: u32,
    pub reported_state: u32,
    pub device_seq: u32,
    pub init_event: u32,
    pub init_old_head: u32,
    pub init_old_failed: u32,
    pub init_dropped: u32,
    pub init_result: i32,
    pub init_old_processed: u64,
    pub reserved: [u8; 24],
    pub pending: RawCommand,
    pub start: RawCommand,
}

/// `rv_k2k_meta`: indices of a slot's kernel-to-kernel ring (local region).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct RawK2kMeta {
    pub tail: u32,
    pub bulk_lock: u32,
    pub bulk_tail: u32,
    pub pad0: [u8; 52],
    pub head: u32,
    pub bulk_head: u32,
    pub pad1: [u8; 56],
}

/// `rv_bulk_ref`: the payload of an `RV_FLAG_BULK` envelope (where its bytes lie in a bulk area).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawBulkRef {
    pub end: u32,
    pub len: u32,
}

/// `rv_k2k_cell`: one cell of a kernel-to-kernel ring.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct RawK2kCell {
    pub seq: u32,
    pub reserved: [u32; 3],
    pub env: RawEnvelope,
}

/// `rv_grid_params`: the sizes the host asks for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RawGridParams {
    pub slot_count: u32,
    pub inbox_capacity: u32,
    pub outbox_capacity: u32,
    pub k2k_capacity: u32,
    pub command_capacity: u32,
    pub event_capacity: u32,
    pub state_bytes: u32,
    pub bulk_bytes: u32,
}

// Compile-time checks of the invariants the C side also asserts. The field-by-field comparison with the C
// compiler's view lives in device/tests/layout.rs.
const _: () = {
    assert!(size_of::<RawEnvelope>() == 128);
    assert!(size_of::<RawControlBlock>() == 256 && align_of::<RawControlBlock>() == 64);
    assert!(size_of::<RawCommand>() == 128);
    assert!(size_of::<RawEvent>() == 64);
    assert!(size_of::<RawGridHeader>() == 576 && align_of::<RawGridHeader>() == 64);
    assert!(size_of::<RawLocalHeader>() == 64);
    assert!(size_of::<RawActorRecord>() == 128);
    assert!(size_of::<RawKeeperRecord>() == 320);
    assert!(size_of::<RawK2kMeta>() == 128);
    assert!(size_of::<RawK2kCell>() == 144);
    // writer grouping of the control block: each line starts where the C header says
    assert!(offset_of!(RawControlBlock, state) == 0);
    assert!(offset_of!(RawControlBlock, host_pending_op) == 64);
    assert!(offset_of!(RawControlBlock, inbox_head) == 128);
    assert!(offset_of!(RawControlBlock, inbox_tail) == 192);
    // producer and consumer indices of each ring on different lines
    assert!(offset_of!(RawGridHeader, command_tail) / 64 != offset_of!(RawGridHeader, command_head) / 64);
    assert!(offset_of!(RawGridHeader, event_tail) / 64 != offset_of!(RawGridHeader, event_head) / 64);
    assert!(offset_of!(RawK2kMeta, tail) / 64 != offset_of!(RawK2kMeta, head) / 64);
    assert!(offset_of!(RawEnvelope, payload) == 32);
};
