/*
 * rv_layout.h - THE definition of every structure shared between the host and the persistent kernel.
 *
 * The Rust mirror in device/src/layout.rs is checked against this file by a test that compiles
 * rv_layout_report.cpp and compares every size, offset and constant (see device/tests/layout.rs).
 *
 * Memory is split in two regions:
 *   - the SHARED region (host-visible: mapped pinned memory on CUDA): grid header, control blocks,
 *     command ring, event ring, per-slot inboxes (host -> device) and outboxes (device -> host);
 *   - the LOCAL region (device memory on CUDA): block 0's private per-slot records, the attention
 *     bitmap, the kernel-to-kernel rings and the behaviours' state regions.
 * Read-modify-write atomics are used only in the LOCAL region. Every ring in the SHARED region has
 * exactly one producer and one consumer and uses only loads, stores and fences.
 *
 * All ring indices are free-running uint32_t counters; capacities are powers of two.
 */
#ifndef RV_LAYOUT_H
#define RV_LAYOUT_H

#include "rv_port.h"

#define RV_MAGIC 0x52564752u /* "RGVR" */
#define RV_PROTOCOL_VERSION 6u
#define RV_PAYLOAD_BYTES 96u
#define RV_INIT_BYTES 96u
#define RV_MAX_BEHAVIOURS 256u
#define RV_NO_INDEX 0xFFFFFFFFu
#define RV_HOST_ENDPOINT 0xFFFFFFFFu
#define RV_MAX_SENDS_PER_MESSAGE 4u
/* Kernel-to-kernel addresses: a slot of the sender's own device (below RV_ROUTED_BIT), or a *routed* address,
 * RV_ROUTED_BIT | device << RV_ROUTED_DEVICE_SHIFT | slot: the actor in `slot` of device `device` of the host's
 * runtime (devices 0 to RV_MAX_ROUTED_DEVICES - 1, slots below 2^24), reached through the host. A routed send
 * travels in the sender's outbox, the host writes it into the target's inbox (rv_stage_routed). */
#define RV_ROUTED_BIT 0x80000000u
#define RV_ROUTED_DEVICE_SHIFT 24u
#define RV_ROUTED_SLOT_MASK 0x00FFFFFFu
#define RV_MAX_ROUTED_DEVICES 127u /* device 127 with the largest slot would be RV_HOST_ENDPOINT */
#define RV_COMMANDS_PER_STEP 64u /* most commands block 0 carries out in one step (it beats after each) */
#define RV_IDLE_BEAT_NS 1000000ull /* an idle Active actor's heartbeat: at most once per millisecond */
#define RV_QUIET_NO 0u             /* the next step is a full one */
#define RV_QUIET_STOPPED 1u        /* idle and not running: nothing until host_seq or device_seq moves */
#define RV_QUIET_ACTIVE 2u         /* idle and Active: beats at the idle rate until host_seq or device_seq moves */

/* Lifecycle of a slot. */
#define RV_STATE_DORMANT 0u
#define RV_STATE_INITIALIZING 1u
#define RV_STATE_ACTIVE 2u
#define RV_STATE_DRAINING 3u
#define RV_STATE_TERMINATED 4u
#define RV_STATE_FAILED 5u

/* Commands, host -> block 0. */
#define RV_OP_NONE 0u
#define RV_OP_CREATE 1u
#define RV_OP_KILL 2u
#define RV_OP_RESTART 3u
#define RV_OP_DRAIN 4u
#define RV_OP_RESUME 5u
#define RV_OP_INIT 6u /* block 0's record only: a creation waits for the actor's block to run the init */
/* The cmd_id of a restart block 0 carries out under the host's grant (no command): this bit, the slot in bits
 * 32-62, the new generation in bits 0-31. Host command ids never have it. */
#define RV_GRANTED_CMD 0x8000000000000000ull

/* Events, block 0 -> host. */
#define RV_EVT_CREATED 1u       /* slot Active after Create */
#define RV_EVT_CREATE_FAILED 2u /* the behaviour's init failed: slot Failed */
#define RV_EVT_KILLED 3u        /* slot Terminated by Kill */
#define RV_EVT_RESTARTED 4u     /* slot Active again after Restart (new generation) */
#define RV_EVT_DRAINING 5u      /* slot Draining */
#define RV_EVT_DRAINED 6u       /* drain finished: slot Terminated */
#define RV_EVT_RESUMED 7u       /* slot Active again after Resume */
#define RV_EVT_FAILED 8u        /* the actor reported a failure: slot Failed */
#define RV_EVT_REJECTED 9u      /* a command was rejected; nothing changed */

/* Envelope kinds and flags. */
#define RV_KIND_USER 1u  /* host -> actor */
#define RV_KIND_REPLY 2u /* actor -> host */
#define RV_KIND_INIT 3u  /* creation: the init bytes, handed to the behaviour once */
#define RV_KIND_K2K 4u   /* actor -> actor */
#define RV_KIND_ERROR 5u /* device -> host: the message was rejected; payload is an rv_error_payload */
#define RV_KIND_VOID 6u  /* a kernel-to-kernel cell whose send was aborted: skipped by the consumer */
#define RV_KIND_STATE 7u /* host -> actor: answered with a copy of the state region, taken at a message boundary
                          * in order with the slot's other messages; the behaviour does not run. An inline u32
                          * payload N asks for the region's first N bytes only (rv_state_read_len) */
#define RV_FLAG_NO_REPLY 1u
/* The payload (over RV_PAYLOAD_BYTES) lies in a bulk area: the envelope's payload is an rv_bulk_ref to it. */
#define RV_FLAG_BULK 2u
/* Traced (Device::trace_call): the actor records when its step saw, read, ran and answered this message in the
 * grid header's trace_ns (device clock in host time), for the hop-by-hop breakdown of a call. */
#define RV_FLAG_TRACE 4u
/* Most bytes per bulk area of a slot (DeviceConfig's bulk_bytes: a power of two, or 0 for none). */
#define RV_MAX_BULK_BYTES (1u << 24)

/* Fault-injection bits (control block, host-written line). Executed by the device code. */
#define RV_FAULT_CRASH_NEXT 1u /* fail with RV_ERR_INJECTED on the next message */
#define RV_FAULT_STALL 2u      /* stop making progress (and stop the heartbeat) while set */
#define RV_FAULT_CORRUPT_NEXT 4u /* the next host message is treated as a corrupt envelope */
#define RV_FAULT_WEDGE 8u /* stuck inside the behaviour: no progress, no heartbeat, requests never acknowledged */

/* Device-wide fault bits (grid header, host-written line). Executed by every step function. */
#define RV_DEVICE_STALL 1u /* no block makes progress (block 0's heartbeat stops too) while set */
#define RV_DEVICE_HALT 2u  /* the persistent kernel stops for good: the device is lost */

/* Values of the grid header's `terminate` (host-written; every block leaves its loop on any nonzero value). */
#define RV_TERMINATE_LEAVE 1u /* for good */
#define RV_TERMINATE_PAUSE 2u /* paused: the host relaunches the kernel over the same memory */

/* The floor probe (rv_floor_thread): the host stores this as the request to stop the answering thread early. */
#define RV_FLOOR_STOP 0xFFFFFFFFu

/* Result and error codes. 0 = ok; > 0 = failure codes; RV_STALL: "not now, try again later". */
#define RV_OK 0
#define RV_STALL (-1)
#define RV_ERR_SLOT_RANGE 1
#define RV_ERR_UNKNOWN_BEHAVIOUR 2
#define RV_ERR_ILLEGAL_TRANSITION 3
#define RV_ERR_STALE_GENERATION 4
#define RV_ERR_BUSY 5
#define RV_ERR_BAD_COMMAND 6
#define RV_ERR_BAD_ENVELOPE 7
#define RV_ERR_PAYLOAD_TOO_LARGE 8
#define RV_ERR_LIMIT 9
#define RV_ERR_K2K_FULL 10
#define RV_ERR_NOT_ALLOWED 11
#define RV_ERR_INJECTED 12
#define RV_ERR_POISON 13
#define RV_ERR_TARGET_GONE 14 /* kernel-to-kernel target not running, or discarded by a kill/restart */
#define RV_ERR_OUTBOX_FULL 15 /* no room in the outbox's bulk area for a large reply now: return RV_STALL */
#define RV_ERR_USER_BASE 1000 /* behaviours report their own failures from here on */

/* Step results (bit set). */
#define RV_STEP_PROGRESS 1u  /* did some work */
#define RV_STEP_REPLIED 2u   /* published something the host should read */
#define RV_STEP_ATTENTION 4u /* asked block 0 to look at this slot */

/* ---------------------------------------------------------------------------------------------------
 * Envelope: 128 bytes. Header 32 bytes, payload 96 bytes.
 * ------------------------------------------------------------------------------------------------- */
typedef struct RV_ALIGN(16) rv_envelope {
    uint8_t kind;
    uint8_t flags;
    uint16_t payload_len;
    uint32_t source;      /* slot index, or RV_HOST_ENDPOINT */
    uint32_t destination; /* slot index, or RV_HOST_ENDPOINT */
    uint32_t generation;  /* replies: generation of the replying actor */
    uint64_t correlation;
    uint64_t hlc; /* hybrid logical clock: (physical ms << 16) | logical */
    uint8_t payload[RV_PAYLOAD_BYTES];
} rv_envelope;

/* Payload of an RV_FLAG_BULK envelope: where its bytes lie in a slot's bulk area of B bytes (a power of two).
 * Bulk areas are byte rings with free-running u32 counters: the message occupies [end - len, end), never
 * wrapping (a producer skips to the area's start when the rest does not fit), so it starts at
 * (end - len) % B and (end - len) % B + len <= B. Consumers free an area in message order (up to `end`). */
typedef struct rv_bulk_ref {
    uint32_t end;
    uint32_t len;
} rv_bulk_ref;

/* Payload of an RV_KIND_ERROR envelope. */
typedef struct rv_error_payload {
    int32_t code;
    uint32_t detail;
} rv_error_payload;

/* ---------------------------------------------------------------------------------------------------
 * Control block: 256 bytes, 64-byte aligned, four cache lines grouped by writer.
 * ------------------------------------------------------------------------------------------------- */
typedef struct RV_ALIGN(64) rv_control_block {
    /* line 0: lifecycle and counters, written by the device (block 0 while the slot is not running,
     * the actor itself while it is). */
    uint32_t state;
    uint32_t generation;
    uint64_t heartbeat;
    uint64_t messages_processed;
    int32_t last_error;
    uint32_t behaviour;
    uint64_t hlc;
    uint32_t failed_index; /* inbox index of the message being processed at failure, or RV_NO_INDEX */
    uint32_t request_ack;  /* last block-0 request the actor carried out */
    uint32_t k2k_sent;
    uint32_t k2k_received;
    uint32_t k2k_dropped; /* kernel-to-kernel messages discarded (restart, crash while processing) */
    uint32_t bad_envelopes;

    /* line 1: written by the host. */
    uint32_t host_pending_op; /* op of the command the host has in flight for this slot (diagnostics) */
    uint32_t host_flags;
    uint32_t fault_flags;
    uint32_t fault_seq;
    uint64_t fault_arg;
    uint32_t restart_grant; /* the host's standing permission: if the incarnation of this generation fails, block
                             * 0 restarts it in place at once (same behaviour and init); 0: none */
    uint8_t host_reserved[36];

    /* line 2: device-written ring indices, and block 0's requests to the actor. */
    uint32_t inbox_head;  /* consumer of the inbox: the actor */
    uint32_t outbox_tail; /* producer of the outbox: the actor */
    uint32_t request;     /* RV_OP_KILL / RV_OP_DRAIN / RV_OP_RESUME */
    uint32_t request_seq; /* block 0 bumps it (release) after writing request and drain_until */
    uint32_t drain_until; /* inbox index at which a drain is complete */
    uint32_t fault_ack;   /* last fault_seq whose one-shot fault the actor consumed */
    uint64_t stall_until_ns; /* the behaviour asked to stall (no progress, no heartbeat) until then */
    uint32_t grant_floor;     /* a granted restart: the inbox cells from here on hold messages the host has still
                               * to read back (hand back); it reuses none of them before it has seen ... */
    uint32_t grant_floor_gen; /* ... the event of this generation (the restart's); written before inbox_head */
    uint8_t device_reserved[24];

    /* line 3: host-written ring indices. */
    uint32_t inbox_tail; /* producer of the inbox: the host */
    uint32_t host_seq;   /* the host bumps it (release) after every write the actor must notice: a message
                          * published, a fault injected. The actor's step reads it with the inbox tail, in one
                          * 64-bit load (an idle step reads nothing else). */
    uint32_t outbox_head;      /* consumer of the outbox: the host */
    uint32_t outbox_bulk_head; /* consumer of the outbox's bulk area: the host (bytes, free-running) */
    uint8_t host_index_reserved[48];
} rv_control_block;

/* ---------------------------------------------------------------------------------------------------
 * Command (host -> block 0) and event (block 0 -> host) records.
 * ------------------------------------------------------------------------------------------------- */
typedef struct RV_ALIGN(16) rv_command {
    uint32_t op;
    uint32_t slot;
    uint32_t expected_generation;
    uint32_t behaviour;
    uint64_t cmd_id;
    uint32_t inbox_index; /* Create/Restart: first inbox index of the new incarnation; Drain: drain_until */
    uint32_t init_len;
    uint8_t init[RV_INIT_BYTES];
} rv_command;

typedef struct RV_ALIGN(16) rv_event {
    uint32_t kind;
    uint32_t slot;
    uint32_t generation; /* after the event */
    uint32_t state;      /* after the event */
    int32_t code;        /* error code (rejections, failures) */
    uint32_t inbox_head; /* first inbox index the previous incarnation did not consume */
    uint32_t failed_index;
    uint32_t k2k_dropped;
    uint64_t cmd_id; /* 0 for events no command caused */
    uint64_t time_ns;
    uint64_t messages_processed;
    uint32_t op;          /* the command's op; Failed: RV_OP_RESTART when a granted restart in place follows */
    uint32_t inbox_start; /* Created/Restarted/CreateFailed: the new incarnation's first inbox index */
} rv_event;

/* ---------------------------------------------------------------------------------------------------
 * Grid header: 576 bytes, nine lines.
 * ------------------------------------------------------------------------------------------------- */
typedef struct RV_ALIGN(64) rv_grid_header {
    /* lines 0-2: configuration, written by the host before the kernel starts, read-only after. */
    uint32_t magic;
    uint32_t version;
    uint32_t slot_count;
    uint32_t inbox_capacity;
    uint32_t outbox_capacity;
    uint32_t k2k_capacity;
    uint32_t command_capacity;
    uint32_t event_capacity;
    uint32_t state_bytes;
    uint32_t payload_bytes;
    uint64_t shared_bytes;
    uint64_t local_bytes;
    uint64_t off_blocks;
    uint64_t off_commands;
    uint64_t off_events;
    uint64_t off_inboxes;
    uint64_t off_outboxes;
    uint64_t off_keeper_records;
    uint64_t off_attention;
    uint64_t off_k2k_meta;
    uint64_t off_k2k_cells;
    uint64_t off_state;
    /* added to the device's raw clock to give host time (CLOCK_REALTIME, ns); the CUDA backend measures it
     * before the kernel starts (%globaltimer has no defined epoch); 0 on the CPU backend. */
    int64_t clock_offset_ns;
    uint64_t off_actor_records; /* local: one rv_actor_record per slot */
    uint64_t off_doorbells;     /* shared: one uint32_t per possible block (slot_count + 1), see rv_entry.cu */
    uint32_t bulk_bytes;        /* bytes of each of a slot's three bulk areas (messages over RV_PAYLOAD_BYTES) */
    uint32_t bulk_reserved;
    uint64_t off_inbox_bulk;  /* shared: host -> actor, bulk_bytes per slot */
    uint64_t off_outbox_bulk; /* shared: actor -> host, bulk_bytes per slot */
    uint64_t off_k2k_bulk;    /* local: actor -> actor, bulk_bytes per slot */

    /* line 3: host runtime flags. */
    uint32_t terminate;     /* nonzero: every block leaves its loop (RV_TERMINATE_LEAVE, RV_TERMINATE_PAUSE) */
    uint32_t device_faults; /* RV_DEVICE_* bits */
    uint32_t trace_armed;   /* nonzero while the host has a traced call in flight: where a clock read is dear (the
                             * host build), actor steps stamp their start only then (rv_actor_step) */
    uint8_t host_reserved[52];

    /* line 4: written by the device (block 0, but for the trace). */
    uint64_t keeper_heartbeat;
    uint64_t commands_processed;
    uint64_t events_published;
    uint32_t blocks_started; /* blocks of the persistent kernel that have entered it (the launch handshake) */
    uint32_t trace_slot;     /* the slot that answered the last traced message (RV_FLAG_TRACE) ... */
    uint64_t trace_ns[4];    /* ... and when (host time): its step began, read it, ran it, published the reply;
                              * trace_ns[3] stored last (release). Before the persistent kernel starts, the
                              * CUDA backend's clock probe uses the first three as its cells (zeroed after) */

    /* lines 5-8: command ring and event ring indices, producer and consumer on separate lines. */
    uint32_t command_tail; /* host */
    uint8_t pad4[60];
    uint32_t command_head; /* block 0 */
    uint8_t pad5[60];
    uint32_t event_tail; /* block 0 */
    uint8_t pad6[60];
    uint32_t event_head; /* host */
    uint8_t pad7[60];
} rv_grid_header;

/* ---------------------------------------------------------------------------------------------------
 * LOCAL region records.
 * ------------------------------------------------------------------------------------------------- */

/* The first 64 bytes of the local region: counters the blocks update with device-scope atomics. */
typedef struct RV_ALIGN(64) rv_local_header {
    uint32_t blocks_started; /* each block adds 1 when it enters the persistent kernel; block 0 publishes it */
    uint32_t pause_acks;     /* blocks that agreed to the pause asked for (rv_entry.cu): free-running, a whole
                              * grid's worth per pause carried out */
    uint64_t keeper_beats; /* block 0's heartbeat count (the shared header's keeper_heartbeat is its copy:
                                * block 0 never reads mapped memory to count) */
    uint8_t reserved[48];
} rv_local_header;

/* Block 0's private view of a slot. */
typedef struct RV_ALIGN(64) rv_keeper_record {
    uint32_t pending_op;     /* a command waiting for the actor to acknowledge a request */
    uint32_t reported_state; /* the state the host was last told about */
    uint32_t device_seq;     /* block 0 bumps it (release) after every change to the slot the actor must notice */
    /* a creation whose behaviour init the actor's own block runs (pending_op RV_OP_INIT): what its event says */
    uint32_t init_event;        /* RV_EVT_CREATED or RV_EVT_RESTARTED */
    uint32_t init_old_head;     /* the previous incarnation's inbox head */
    uint32_t init_old_failed;   /* ... and failed index */
    uint32_t init_dropped;      /* kernel-to-kernel messages discarded by the re-creation */
    int32_t init_result;        /* written by the actor's block before its state store: the init's own outcome (the
                                 * incarnation may have run and failed on a message by the time block 0 looks) */
    uint64_t init_old_processed; /* the previous incarnation's messages_processed */
    uint8_t reserved[24];
    rv_command pending; /* the command itself (a Restart needs its init bytes after the ack) */
    rv_command start;   /* the command that started the current incarnation (a granted restart repeats it) */
} rv_keeper_record;

/* The actor's own record of a slot (local region, written only by the block that runs the slot): what its last
 * full step saw, so an idle step reads one shared word (host_seq, with the inbox tail) and returns. */
typedef struct RV_ALIGN(64) rv_actor_record {
    uint32_t seen_host_seq;   /* host_seq when the last full step began */
    uint32_t seen_device_seq; /* device_seq when the last full step began */
    uint32_t quiet;           /* RV_QUIET_*: the last full step found nothing to do */
    uint32_t outbox_bulk_tail; /* producer of the outbox's bulk area (bytes, free-running; kept across incarnations) */
    uint64_t beats;        /* heartbeats so far (the control block's heartbeat is a copy) */
    uint64_t next_beat_ns; /* an idle Active slot beats at most once per RV_IDLE_BEAT_NS */
    uint32_t checked_device_seq; /* device_seq when a step last read block 0's request words */
    /* The running incarnation's own fields of its control block, read here instead of across PCIe: the actor
     * writes both copies; block 0 writes the control block's only while the slot is stopped, and rv_actor_init
     * copies them here when an incarnation starts (rv_actor_cache_load). */
    uint32_t inbox_head;
    uint32_t outbox_tail;
    uint32_t outbox_head_seen; /* the host's outbox_head as last read: the outbox has at least the room it leaves */
    uint32_t behaviour;
    uint32_t generation;
    uint64_t messages_processed;
    uint64_t hlc;
    uint64_t stall_until_ns;
    uint8_t reserved[48];
} rv_actor_record;

/* Per-slot kernel-to-kernel ring indices: multi-producer tail and single-consumer head, separate lines. */
typedef struct RV_ALIGN(64) rv_k2k_meta {
    uint32_t tail;      /* producers reserve with CAS */
    uint32_t bulk_lock; /* a large send holds it (try-lock, never waited for) while it reserves bulk bytes and
                         * its cell, so bulk bytes are reserved in cell order */
    uint32_t bulk_tail; /* producer of the bulk area, written under bulk_lock */
    uint8_t pad0[52];
    uint32_t head;      /* the actor (or block 0 while the slot is not running) */
    uint32_t bulk_head; /* consumer of the bulk area: freed up to the end of each large message consumed */
    uint8_t pad1[56];
} rv_k2k_meta;

/* A kernel-to-kernel cell: bounded MPSC queue cell with a sequence number (Vyukov). */
typedef struct RV_ALIGN(16) rv_k2k_cell {
    uint32_t seq;
    uint32_t reserved[3];
    rv_envelope env;
} rv_k2k_cell;

/* Region sizes requested by the host. */
typedef struct rv_grid_params {
    uint32_t slot_count;
    uint32_t inbox_capacity;
    uint32_t outbox_capacity;
    uint32_t k2k_capacity;
    uint32_t command_capacity;
    uint32_t event_capacity;
    uint32_t state_bytes;
    uint32_t bulk_bytes; /* 0 (no messages over RV_PAYLOAD_BYTES) or a power of two up to RV_MAX_BULK_BYTES */
} rv_grid_params;

RV_STATIC_ASSERT(sizeof(rv_envelope) == 128, "envelope is 128 bytes");
RV_STATIC_ASSERT(sizeof(rv_control_block) == 256, "control block is 256 bytes");
RV_STATIC_ASSERT(sizeof(rv_command) == 128, "command is 128 bytes");
RV_STATIC_ASSERT(sizeof(rv_event) == 64, "event is 64 bytes");
RV_STATIC_ASSERT(sizeof(rv_grid_header) == 576, "grid header is 576 bytes");
RV_STATIC_ASSERT(sizeof(rv_local_header) == 64, "local header is 64 bytes");
RV_STATIC_ASSERT(RV_OFFSETOF(rv_grid_header, terminate) % 8 == 0 &&
                     RV_OFFSETOF(rv_grid_header, device_faults) == RV_OFFSETOF(rv_grid_header, terminate) + 4,
                 "terminate and device_faults are read with one 64-bit load (little-endian: terminate low)");
RV_STATIC_ASSERT(RV_OFFSETOF(rv_control_block, inbox_head) % 8 == 0 &&
                     RV_OFFSETOF(rv_control_block, outbox_tail) == RV_OFFSETOF(rv_control_block, inbox_head) + 4,
                 "inbox_head and outbox_tail are published with one 64-bit store (little-endian: inbox_head low)");
RV_STATIC_ASSERT(RV_OFFSETOF(rv_control_block, inbox_tail) % 8 == 0 &&
                     RV_OFFSETOF(rv_control_block, host_seq) == RV_OFFSETOF(rv_control_block, inbox_tail) + 4,
                 "inbox_tail and host_seq are read with one 64-bit load (little-endian: inbox_tail low)");
RV_STATIC_ASSERT(sizeof(rv_actor_record) == 128, "actor record is 128 bytes");
RV_STATIC_ASSERT(sizeof(rv_keeper_record) == 320, "keeper record is 320 bytes");
RV_STATIC_ASSERT(sizeof(rv_k2k_meta) == 128, "k2k meta is 128 bytes");
RV_STATIC_ASSERT(sizeof(rv_k2k_cell) == 144, "k2k cell is 144 bytes");
RV_STATIC_ASSERT(sizeof(rv_bulk_ref) <= RV_PAYLOAD_BYTES, "a bulk reference fits an envelope's payload");

#endif /* RV_LAYOUT_H */
