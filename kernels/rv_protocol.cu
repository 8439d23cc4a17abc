/*
 * rv_protocol.cu - the device protocol: block 0's supervisor step and the actors' step.
 *
 * Compiled by NVRTC (CUDA) and by the host C++ compiler (CPU backend). See docs/protocol.md for the state
 * machine and the layout table, and rv_layout.h for the shared structures.
 *
 * Over 600 lines: it is mirrored function by function by wgsl/rv_protocol.wgsl, and the two are to be split
 * together along the same seams (addressing and bulk, the behaviour API, the actor step, block 0) with a test
 * that keeps them in step (issue 34); split alone, the mirror would be harder to keep, not easier.
 *
 * Ownership rules, which every function below keeps:
 *   - the host writes the host lines of the control block and the producer indices of the inbox and command
 *     ring, and the consumer indices of the outbox and event ring; nothing else;
 *   - block 0 (rv_supervisor_step) writes the command ring head, the event ring, its private records, and a
 *     slot's lifecycle line only while that slot is not running (Dormant, Terminated, Failed, no request
 *     pending); it talks to a running actor through request/request_seq and waits for request_ack;
 *   - an actor (rv_actor_step) writes its lifecycle line, inbox head, outbox tail and request_ack.
 * Every value read from the host is validated before use.
 */
#include "rv_behaviour.h"

#if RV_CUDA
#define RV_STEP_API __device__
#else
#define RV_STEP_API extern "C"
#endif

/* Pointers into the two regions, computed once from the header. Not shared memory itself. */
typedef struct rv_grid_view {
    rv_grid_header *header;
    rv_control_block *blocks;
    rv_command *commands;
    rv_event *events;
    rv_envelope *inboxes;
    rv_envelope *outboxes;
    rv_sv_record *sv;
    uint32_t *attention;
    rv_k2k_meta *k2k_meta;
    rv_k2k_cell *k2k_cells;
    uint8_t *state;
    rv_local_header *local_header;
    rv_actor_record *actors;
    uint32_t *doorbells;
    uint8_t *inbox_bulk;  /* shared: host -> actor bulk areas, bulk_bytes per slot */
    uint8_t *outbox_bulk; /* shared: actor -> host */
    uint8_t *k2k_bulk;    /* local: actor -> actor */
    /* The CPU backend's run set (host memory of the view's own, NULL where blocks sweep their slots): one bit
     * per slot that may have work (`work`, 32 slots a word) and one bit per non-empty word (`work_summary`). */
    uint32_t *work;
    uint32_t *work_summary;
    int64_t clock_offset_ns; /* raw device clock + this = host time */
    uint32_t slot_count;
    uint32_t inbox_capacity;
    uint32_t outbox_capacity;
    uint32_t k2k_capacity;
    uint32_t command_capacity;
    uint32_t event_capacity;
    uint32_t state_bytes;
    uint32_t bulk_bytes; /* 0: no bulk areas (every payload inline) */
    const rv_behaviour_fn *behaviours; /* CPU backend: table indexed by id; NULL on CUDA */
} rv_grid_view;

struct rv_actor_ctx {
    const rv_grid_view *g;
    rv_control_block *cb;
    uint32_t slot;
    uint32_t generation;
    uint32_t init_phase;
    const rv_envelope *msg;
    uint64_t hlc;
    rv_envelope reply; /* the staged reply, built here and copied to the outbox on commit (16-byte stores) */
    uint32_t reply_staged;
    uint32_t reply_bulk;     /* the staged reply is large: its bytes wait in the outbox's bulk area ... */
    uint32_t reply_bulk_end; /* ... and on commit the area's producer counter moves to here */
    uint32_t reply_forwarded; /* the duty to reply went to another actor with rv_forward */
    uint32_t send_count;
    uint32_t routed_count; /* routed sends staged in the outbox past its tail (published on commit) */
    rv_k2k_cell *send_cells[RV_MAX_SENDS_PER_MESSAGE];
    uint32_t send_pos[RV_MAX_SENDS_PER_MESSAGE];
};

#if RV_CUDA
/* Generated per program by the host (device/src/backend/cuda/source.rs): a switch over the registered behaviours. */
__device__ int rv_dispatch_generated(uint32_t behaviour, rv_actor_ctx *ctx, const rv_envelope *msg);
__device__ int rv_behaviour_known_generated(uint32_t behaviour);
#endif

RV_FN int rv_behaviour_known(const rv_grid_view *g, uint32_t behaviour) {
#if RV_CUDA
    (void)g;
    return rv_behaviour_known_generated(behaviour);
#else
    return behaviour < RV_MAX_BEHAVIOURS && g->behaviours != 0 && g->behaviours[behaviour] != 0;
#endif
}

RV_FN int rv_dispatch(const rv_grid_view *g, uint32_t behaviour, rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!rv_behaviour_known(g, behaviour)) return RV_ERR_UNKNOWN_BEHAVIOUR;
#if RV_CUDA
    return rv_dispatch_generated(behaviour, ctx, msg);
#else
    return g->behaviours[behaviour](ctx, msg);
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Addressing. Every index is masked; every slot index is checked by the caller.
 * ---------------------------------------------------------------------------------------------- */
/* Host time (CLOCK_REALTIME ns) as the device sees it: its raw clock corrected by the offset the host measured. */
RV_FN uint64_t rv_grid_now_ns(const rv_grid_view *g) { return (uint64_t)((int64_t)rv_now_ns() + g->clock_offset_ns); }

RV_FN void rv_copy_envelope(rv_envelope *dst, const rv_envelope *src) {
    rv_copy16(dst, src, sizeof(rv_envelope) / 16);
}

RV_FN rv_envelope *rv_inbox_cell(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->inboxes + (uint64_t)slot * g->inbox_capacity + (index & (g->inbox_capacity - 1));
}
RV_FN rv_envelope *rv_outbox_cell(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->outboxes + (uint64_t)slot * g->outbox_capacity + (index & (g->outbox_capacity - 1));
}
RV_FN rv_k2k_cell *rv_k2k_cell_at(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->k2k_cells + (uint64_t)slot * g->k2k_capacity + (index & (g->k2k_capacity - 1));
}
RV_FN uint8_t *rv_state_region(const rv_grid_view *g, uint32_t slot) {
    return g->state + (uint64_t)slot * g->state_bytes;
}

RV_FN uint64_t rv_hlc_next(uint64_t local, uint64_t remote, uint64_t now_ns) {
    uint64_t physical = (now_ns / 1000000ull) << 16;
    uint64_t logical = (local > remote ? local : remote) + 1;
    return physical > logical ? physical : logical;
}

/* Whoever gives `slot` work (block 0, a kernel-to-kernel sender; the host through rv_cpu_mark_work) marks it in
 * the run set after publishing the work: the word's bit, then the summary's. The runner of a word clears the
 * summary bit before it takes the word's bits, and both before its steps read anything, so no mark is lost.
 * Without a run set (CUDA: every block sweeps its slots) nothing is done. */
RV_FN void rv_mark_work(const rv_grid_view *g, uint32_t slot) {
    if (g->work == 0) return;
    uint32_t word = slot >> 5;
    rv_fetch_or_u32(&g->work[word], 1u << (slot & 31u));
    rv_fetch_or_u32(&g->work_summary[word >> 5], 1u << (word & 31u));
}

/* Words of the attention bitmap: one bit per slot. A summary follows them in the same area, one bit per word
 * (rv_attention_summary), so block 0 looks only at the words that have a bit set, not at all of them. */
RV_FN uint32_t rv_attention_words(uint32_t slot_count) { return (slot_count + 31u) / 32u; }

RV_FN uint32_t *rv_attention_summary(const rv_grid_view *g) {
    return g->attention + rv_attention_words(g->slot_count);
}

/* The slot's bit first, then its word's summary bit: block 0 clears a summary bit before it takes the word
 * (rv_supervisor_step), so a bit it misses is announced again by the summary bit set after it. */
RV_FN void rv_raise_attention(const rv_grid_view *g, uint32_t slot) {
    uint32_t word = slot >> 5;
    rv_fetch_or_u32(&g->attention[word], 1u << (slot & 31u));
    rv_fetch_or_u32(&rv_attention_summary(g)[word >> 5], 1u << (word & 31u));
}

/* A fresh per-message context for `slot` (nothing staged). */
RV_FN void rv_ctx_init(rv_actor_ctx *ctx, const rv_grid_view *g, uint32_t slot, uint32_t init_phase,
                       const rv_envelope *msg) {
    ctx->g = g;
    ctx->cb = &g->blocks[slot];
    ctx->slot = slot;
    ctx->generation = ctx->cb->generation;
    ctx->init_phase = init_phase;
    ctx->msg = msg;
    ctx->hlc = ctx->cb->hlc;
    ctx->reply_staged = 0;
    ctx->reply_bulk = 0;
    ctx->reply_forwarded = 0;
    ctx->send_count = 0;
    ctx->routed_count = 0;
}

/* ------------------------------------------------------------------------------------------------
 * Bulk areas: a slot's byte rings for payloads over RV_PAYLOAD_BYTES (see rv_bulk_ref in rv_layout.h).
 * ---------------------------------------------------------------------------------------------- */
/* The reference a bulk envelope carries (its end: what consuming it frees up to). */
RV_FN rv_bulk_ref rv_bulk_ref_of(const rv_envelope *e) {
    rv_bulk_ref r;
    rv_copy_bytes(&r, e->payload, sizeof(r));
    return r;
}

/* Where the bytes an envelope's bulk reference names lie in `slot`'s area of `areas`, or NULL when the
 * reference is malformed or names anything outside that one area (whatever the values, nothing outside it is
 * ever read or written through it). */
RV_FN uint8_t *rv_bulk_at(const rv_grid_view *g, uint8_t *areas, uint32_t slot, const rv_envelope *e) {
    uint32_t size = g->bulk_bytes;
    if (size == 0 || !(e->flags & RV_FLAG_BULK) || e->payload_len != sizeof(rv_bulk_ref)) return 0;
    rv_bulk_ref r = rv_bulk_ref_of(e);
    uint32_t start = (r.end - r.len) & (size - 1);
    if (r.len > size || start + r.len > size) return 0; /* both terms <= RV_MAX_BULK_BYTES: no overflow */
    return areas + (uint64_t)slot * size + start;
}

/* Reserves `len` bytes (1 to `size`) in a bulk area of `size` bytes whose producer counter is `tail` and
 * consumer counter `head`: 16-byte aligned, never wrapping (skips to the area's start when the rest is too
 * short). The bytes in use are [head, tail): the new ones fit if they end within `size` of `head`, or anywhere
 * when nothing is in use (head == tail). Returns the new producer counter (the reference's end), or `tail`
 * itself when there is no room now. */
RV_FN uint32_t rv_bulk_reserve(uint32_t size, uint32_t tail, uint32_t head, uint32_t len) {
    uint32_t start = (tail + 15u) & ~15u;
    if ((start & (size - 1)) + len > size) start = (start + size - 1) & ~(size - 1);
    uint32_t end = start + len;
    return (end - head > size && head != tail) ? tail : end;
}

/* Makes `e` a reference to `len` bytes ending at `end`. */
RV_FN void rv_bulk_ref_set(rv_envelope *e, uint32_t end, uint32_t len) {
    rv_bulk_ref r;
    r.end = end;
    r.len = len;
    e->flags |= (uint8_t)RV_FLAG_BULK;
    e->payload_len = (uint16_t)sizeof(r);
    rv_copy_bytes(e->payload, &r, sizeof(r));
}

/* Copies `len` bytes from anywhere to the start of a bulk reservation (16-byte aligned) in whole 16-byte units,
 * the last one padded: one 16-byte store each on the GPU, where the shared areas are host memory across PCIe.
 * A reservation owns its bytes up to the next 16-byte boundary (the next one starts there at the earliest, and
 * areas are multiples of 16 bytes). */
RV_FN void rv_copy_to_bulk(uint8_t *dst, const void *src, uint32_t len) {
    const uint8_t *from = (const uint8_t *)src;
    uint32_t off = 0;
    if (((uint64_t)from & 15u) == 0) { /* an aligned source (another bulk area: an echo) is read 16 bytes at a time */
        off = len & ~15u;
        rv_copy16(dst, from, off / 16u);
    }
    for (; off < len; off += 16) {
        RV_ALIGN(16) uint8_t unit[16];
        uint32_t n = len - off < 16u ? len - off : 16u;
        for (uint32_t i = 0; i < 16u; ++i) unit[i] = i < n ? from[off + i] : 0;
        rv_copy16(dst + off, unit, 1);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Layout: computed once, on the host, from the requested sizes. Written into the header.
 * ---------------------------------------------------------------------------------------------- */
RV_FN int rv_is_pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }
RV_FN uint64_t rv_align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

/* Returns RV_OK, or RV_ERR_BAD_COMMAND when a size is zero, not a power of two, or too large. */
RV_STEP_API int rv_compute_layout(const rv_grid_params *p, rv_grid_header *h) {
    if (p->slot_count == 0 || p->slot_count > (1u << 24)) return RV_ERR_BAD_COMMAND;
    if (!rv_is_pow2(p->inbox_capacity) || !rv_is_pow2(p->outbox_capacity) || !rv_is_pow2(p->k2k_capacity) ||
        !rv_is_pow2(p->command_capacity) || !rv_is_pow2(p->event_capacity))
        return RV_ERR_BAD_COMMAND;
    if (p->inbox_capacity > (1u << 20) || p->outbox_capacity > (1u << 20) || p->k2k_capacity > (1u << 20) ||
        p->command_capacity > (1u << 20) || p->event_capacity > (1u << 20))
        return RV_ERR_BAD_COMMAND;
    if (p->state_bytes == 0 || p->state_bytes % 64 != 0 || p->state_bytes > (1u << 24)) return RV_ERR_BAD_COMMAND;
    if (p->bulk_bytes != 0 && (!rv_is_pow2(p->bulk_bytes) || p->bulk_bytes < 256 || p->bulk_bytes > RV_MAX_BULK_BYTES))
        return RV_ERR_BAD_COMMAND;
    rv_zero_bytes(h, sizeof(rv_grid_header));
    h->magic = RV_MAGIC;
    h->version = RV_PROTOCOL_VERSION;
    h->slot_count = p->slot_count;
    h->inbox_capacity = p->inbox_capacity;
    h->outbox_capacity = p->outbox_capacity;
    h->k2k_capacity = p->k2k_capacity;
    h->command_capacity = p->command_capacity;
    h->event_capacity = p->event_capacity;
    h->state_bytes = p->state_bytes;
    h->payload_bytes = RV_PAYLOAD_BYTES;
    h->bulk_bytes = p->bulk_bytes;
    uint64_t n = p->slot_count;
    uint64_t off = sizeof(rv_grid_header);
    h->off_blocks = off;
    off = rv_align_up(off + n * sizeof(rv_control_block), 64);
    h->off_commands = off;
    off = rv_align_up(off + (uint64_t)p->command_capacity * sizeof(rv_command), 64);
    h->off_events = off;
    off = rv_align_up(off + (uint64_t)p->event_capacity * sizeof(rv_event), 64);
    h->off_inboxes = off;
    off = rv_align_up(off + n * p->inbox_capacity * sizeof(rv_envelope), 64);
    h->off_outboxes = off;
    off = rv_align_up(off + n * p->outbox_capacity * sizeof(rv_envelope), 64);
    h->off_doorbells = off;
    off = rv_align_up(off + (n + 1) * sizeof(uint32_t), 64);
    h->off_inbox_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->off_outbox_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->shared_bytes = off;
    off = sizeof(rv_local_header);
    h->off_sv_records = off;
    off = rv_align_up(off + n * sizeof(rv_sv_record), 64);
    h->off_actor_records = off;
    off = rv_align_up(off + n * sizeof(rv_actor_record), 64);
    h->off_attention = off;
    uint64_t attention_words = rv_attention_words(p->slot_count);
    off = rv_align_up(off + (attention_words + (attention_words + 31) / 32) * 4, 64); /* bitmap and summary */
    h->off_k2k_meta = off;
    off = rv_align_up(off + n * sizeof(rv_k2k_meta), 64);
    h->off_k2k_cells = off;
    off = rv_align_up(off + n * p->k2k_capacity * sizeof(rv_k2k_cell), 64);
    h->off_state = off;
    off = rv_align_up(off + n * p->state_bytes, 64);
    h->off_k2k_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->local_bytes = off;
    return RV_OK;
}

/* Builds a view over the two regions. Returns RV_OK or RV_ERR_BAD_COMMAND if the header is not ours. */
RV_STEP_API int rv_grid_view_init(rv_grid_view *v, void *shared, void *local, const rv_behaviour_fn *behaviours) {
    rv_grid_header *h = (rv_grid_header *)shared;
    if (h->magic != RV_MAGIC || h->version != RV_PROTOCOL_VERSION) return RV_ERR_BAD_COMMAND;
    uint8_t *s = (uint8_t *)shared;
    uint8_t *l = (uint8_t *)local;
    v->header = h;
    v->blocks = (rv_control_block *)(s + h->off_blocks);
    v->commands = (rv_command *)(s + h->off_commands);
    v->events = (rv_event *)(s + h->off_events);
    v->inboxes = (rv_envelope *)(s + h->off_inboxes);
    v->outboxes = (rv_envelope *)(s + h->off_outboxes);
    v->sv = (rv_sv_record *)(l + h->off_sv_records);
    v->attention = (uint32_t *)(l + h->off_attention);
    v->k2k_meta = (rv_k2k_meta *)(l + h->off_k2k_meta);
    v->k2k_cells = (rv_k2k_cell *)(l + h->off_k2k_cells);
    v->state = l + h->off_state;
    v->local_header = (rv_local_header *)l;
    v->actors = (rv_actor_record *)(l + h->off_actor_records);
    v->doorbells = (uint32_t *)(s + h->off_doorbells);
    v->inbox_bulk = s + h->off_inbox_bulk;
    v->outbox_bulk = s + h->off_outbox_bulk;
    v->k2k_bulk = l + h->off_k2k_bulk;
    v->work = 0;
    v->work_summary = 0;
    v->clock_offset_ns = h->clock_offset_ns;
    v->slot_count = h->slot_count;
    v->inbox_capacity = h->inbox_capacity;
    v->outbox_capacity = h->outbox_capacity;
    v->k2k_capacity = h->k2k_capacity;
    v->command_capacity = h->command_capacity;
    v->event_capacity = h->event_capacity;
    v->state_bytes = h->state_bytes;
    v->bulk_bytes = h->bulk_bytes;
    v->behaviours = behaviours;
    return RV_OK;
}

/* Initialises one slot before the kernel starts (both regions are zeroed before): k2k sequence numbers, and
 * the control block fields whose zero is not "none". */
RV_STEP_API void rv_init_local_slot(const rv_grid_view *g, uint32_t slot) {
    if (slot >= g->slot_count) return;
    g->blocks[slot].failed_index = RV_NO_INDEX;
    for (uint32_t i = 0; i < g->k2k_capacity; ++i) rv_k2k_cell_at(g, slot, i)->seq = i;
}

/* ------------------------------------------------------------------------------------------------
 * Behaviour API.
 * ---------------------------------------------------------------------------------------------- */
RV_API void *rv_state(rv_actor_ctx *ctx) { return rv_state_region(ctx->g, ctx->slot); }
RV_API uint32_t rv_state_bytes(rv_actor_ctx *ctx) { return ctx->g->state_bytes; }
RV_API uint32_t rv_self(rv_actor_ctx *ctx) { return ctx->slot; }
RV_API uint32_t rv_generation(rv_actor_ctx *ctx) { return ctx->generation; }
RV_API uint64_t rv_clock_ns(rv_actor_ctx *ctx) { return rv_grid_now_ns(ctx->g); }
RV_API uint64_t rv_monotonic_ns(rv_actor_ctx *ctx) {
    (void)ctx;
    return rv_now_monotonic_ns();
}

/* A host message's bytes lie in the slot's inbox bulk area, a kernel-to-kernel message's in its k2k one. The
 * step validated the reference before the behaviour runs; a bad one reads as an empty payload. */
RV_API const uint8_t *rv_payload(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!(msg->flags & RV_FLAG_BULK)) return msg->payload;
    uint8_t *areas = msg->kind == RV_KIND_K2K ? ctx->g->k2k_bulk : ctx->g->inbox_bulk;
    const uint8_t *p = rv_bulk_at(ctx->g, areas, ctx->slot, msg);
    return p != 0 ? p : msg->payload;
}

RV_API uint32_t rv_payload_len(rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!(msg->flags & RV_FLAG_BULK)) return msg->payload_len <= RV_PAYLOAD_BYTES ? msg->payload_len : 0;
    uint8_t *areas = msg->kind == RV_KIND_K2K ? ctx->g->k2k_bulk : ctx->g->inbox_bulk;
    if (rv_bulk_at(ctx->g, areas, ctx->slot, msg) == 0) return 0;
    return rv_bulk_ref_of(msg).len;
}

RV_API uint32_t rv_max_payload(rv_actor_ctx *ctx) {
    return ctx->g->bulk_bytes > RV_PAYLOAD_BYTES ? ctx->g->bulk_bytes : RV_PAYLOAD_BYTES;
}

RV_FN int rv_stage_reply(rv_actor_ctx *ctx, uint8_t kind, const void *payload, uint32_t len) {
    if (ctx->init_phase) return RV_ERR_NOT_ALLOWED;
    if (ctx->reply_staged || ctx->reply_forwarded) return RV_ERR_LIMIT;
    if (len > rv_max_payload(ctx)) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->msg->flags & RV_FLAG_NO_REPLY) return RV_OK;
    const rv_grid_view *g = ctx->g;
    uint32_t bulk_end = 0;
    if (len > RV_PAYLOAD_BYTES) {
        /* The bytes go straight into the outbox's bulk area, past its producer counter: published (the counter
         * moved) only on commit, overwritten by the next reply otherwise. */
        rv_actor_record *ar = &g->actors[ctx->slot];
        uint32_t head = rv_load_acquire_u32(&ctx->cb->outbox_bulk_head);
        bulk_end = rv_bulk_reserve(g->bulk_bytes, ar->outbox_bulk_tail, head, len);
        if (bulk_end == ar->outbox_bulk_tail) return RV_ERR_OUTBOX_FULL; /* len > 0: a reservation moves it */
        uint32_t start = (bulk_end - len) & (g->bulk_bytes - 1);
        rv_copy_to_bulk(g->outbox_bulk + (uint64_t)ctx->slot * g->bulk_bytes + start, payload, len);
    }
    /* Staged locally; space for one outbox cell was checked before the message was dispatched. */
    rv_envelope *e = &ctx->reply;
    e->kind = kind;
    e->flags = 0;
    e->payload_len = (uint16_t)len;
    e->source = ctx->slot;
    e->destination = RV_HOST_ENDPOINT;
    e->generation = ctx->generation;
    e->correlation = ctx->msg->correlation;
    e->hlc = ctx->hlc;
    if (len > RV_PAYLOAD_BYTES) {
        rv_bulk_ref_set(e, bulk_end, len);
        ctx->reply_bulk = 1;
        ctx->reply_bulk_end = bulk_end;
    } else {
        rv_copy_bytes(e->payload, payload, len);
    }
    ctx->reply_staged = 1;
    return RV_OK;
}

RV_API int rv_reply(rv_actor_ctx *ctx, const void *payload, uint32_t len) {
    return rv_stage_reply(ctx, RV_KIND_REPLY, payload, len);
}

RV_API int rv_reply_error(rv_actor_ctx *ctx, int32_t code, uint32_t detail) {
    rv_error_payload p;
    p.code = code;
    p.detail = detail;
    return rv_stage_reply(ctx, RV_KIND_ERROR, &p, sizeof(p));
}

/* A send to a routed address (rv_address): the envelope is written to this slot's outbox past its tail, and the
 * host routes it once the message commits (rv_finish_message moves the tail over it; a voided message leaves the
 * cell to be overwritten). One outbox cell stays free for the message's reply (room for which was checked before
 * the message was dispatched). Inline payloads only. */
RV_FN int rv_stage_routed(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len, uint8_t flags) {
    const rv_grid_view *g = ctx->g;
    if ((destination >> RV_ROUTED_DEVICE_SHIFT) - (RV_ROUTED_BIT >> RV_ROUTED_DEVICE_SHIFT) >= RV_MAX_ROUTED_DEVICES)
        return RV_ERR_SLOT_RANGE;
    if (len > RV_PAYLOAD_BYTES) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->send_count + ctx->routed_count >= RV_MAX_SENDS_PER_MESSAGE) return RV_ERR_LIMIT;
    if (g->outbox_capacity < 2u) return RV_ERR_LIMIT; /* no cell to spare, ever */
    uint32_t tail = ctx->cb->outbox_tail + ctx->routed_count;
    uint32_t used = tail - rv_load_acquire_u32(&ctx->cb->outbox_head);
    if (used + 2u > g->outbox_capacity) return RV_ERR_K2K_FULL;
    rv_envelope e;
    e.kind = RV_KIND_K2K;
    e.flags = flags;
    e.payload_len = (uint16_t)len;
    e.source = ctx->slot;
    e.destination = destination;
    e.generation = ctx->generation;
    e.correlation = ctx->msg->correlation;
    e.hlc = ctx->hlc;
    rv_copy_bytes(e.payload, payload, len);
    rv_copy_envelope(rv_outbox_cell(g, ctx->slot, tail), &e);
    ctx->routed_count += 1;
    return RV_OK;
}

RV_FN int rv_stage_send(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len, uint8_t flags) {
    const rv_grid_view *g = ctx->g;
    if (ctx->init_phase) return RV_ERR_NOT_ALLOWED;
    if (destination & RV_ROUTED_BIT) return rv_stage_routed(ctx, destination, payload, len, flags);
    if (destination >= g->slot_count) return RV_ERR_SLOT_RANGE;
    if (len > rv_max_payload(ctx)) return RV_ERR_PAYLOAD_TOO_LARGE;
    if (ctx->send_count + ctx->routed_count >= RV_MAX_SENDS_PER_MESSAGE) return RV_ERR_LIMIT;
    uint32_t target_state = rv_load_acquire_u32(&g->blocks[destination].state);
    if (target_state != RV_STATE_ACTIVE && target_state != RV_STATE_DRAINING) return RV_ERR_TARGET_GONE;
    rv_k2k_meta *meta = &g->k2k_meta[destination];
    int bulk = len > RV_PAYLOAD_BYTES;
    uint32_t bulk_end = 0;
    if (bulk) {
        /* A large send reserves its bulk bytes and its cell under the ring's bulk lock, so bulk bytes are taken in
         * cell order and the consumer frees them in that order. A try-lock: a busy lock is "full for now". */
        if (rv_cas_u32(&meta->bulk_lock, 0, 1) != 0) return RV_ERR_K2K_FULL;
        uint32_t tail = rv_load_relaxed_dev_u32(&meta->bulk_tail);
        bulk_end = rv_bulk_reserve(g->bulk_bytes, tail, rv_load_acquire_dev_u32(&meta->bulk_head), len);
        if (bulk_end == tail) {
            rv_store_release_dev_u32(&meta->bulk_lock, 0);
            return RV_ERR_K2K_FULL;
        }
    }
    /* Reserve a cell in the destination's bounded MPSC queue (device-scope CAS, LOCAL memory). */
    uint32_t pos = rv_load_relaxed_dev_u32(&meta->tail);
    rv_k2k_cell *cell;
    for (;;) {
        cell = rv_k2k_cell_at(g, destination, pos);
        uint32_t seq = rv_load_acquire_dev_u32(&cell->seq);
        int32_t dif = (int32_t)(seq - pos);
        if (dif == 0) {
            uint32_t seen = rv_cas_u32(&meta->tail, pos, pos + 1);
            if (seen == pos) break;
            pos = seen;
        } else if (dif < 0) {
            if (bulk) rv_store_release_dev_u32(&meta->bulk_lock, 0);
            return RV_ERR_K2K_FULL;
        } else {
            pos = rv_load_relaxed_dev_u32(&meta->tail);
        }
    }
    if (bulk) {
        rv_store_release_dev_u32(&meta->bulk_tail, bulk_end);
        rv_store_release_dev_u32(&meta->bulk_lock, 0);
    }
    rv_envelope *e = &cell->env;
    e->kind = RV_KIND_K2K;
    e->flags = flags;
    e->payload_len = (uint16_t)len;
    e->source = ctx->slot;
    e->destination = destination;
    e->generation = ctx->generation;
    e->correlation = ctx->msg->correlation;
    e->hlc = ctx->hlc;
    if (bulk) {
        /* The cell and these bytes are this sender's until it publishes the cell (rv_finish_message). */
        uint32_t start = (bulk_end - len) & (g->bulk_bytes - 1);
        rv_copy_to_bulk(g->k2k_bulk + (uint64_t)destination * g->bulk_bytes + start, payload, len);
        rv_bulk_ref_set(e, bulk_end, len);
    } else {
        rv_copy_bytes(e->payload, payload, len);
    }
    ctx->send_cells[ctx->send_count] = cell;
    ctx->send_pos[ctx->send_count] = pos;
    ctx->send_count += 1;
    return RV_OK;
}

RV_API int rv_send(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len) {
    return rv_stage_send(ctx, destination, payload, len, (uint8_t)RV_FLAG_NO_REPLY);
}

RV_API int rv_forward(rv_actor_ctx *ctx, uint32_t destination, const void *payload, uint32_t len) {
    if (ctx->reply_staged || ctx->reply_forwarded) return RV_ERR_LIMIT;
    int rc = rv_stage_send(ctx, destination, payload, len, (uint8_t)(ctx->msg->flags & RV_FLAG_NO_REPLY));
    if (rc == RV_OK) ctx->reply_forwarded = 1;
    return rc;
}

RV_API void rv_stall_for(rv_actor_ctx *ctx, uint64_t ns) {
    if (ctx->init_phase) return;
    rv_store_relaxed_u64(&ctx->cb->stall_until_ns, rv_grid_now_ns(ctx->g) + ns);
}

/* Publishes (ok) or voids (!ok) what the behaviour staged for the current message. */
RV_FN uint32_t rv_finish_message(rv_actor_ctx *ctx, int ok) {
    uint32_t out = 0;
    for (uint32_t i = 0; i < ctx->send_count; ++i) {
        rv_k2k_cell *cell = ctx->send_cells[i];
        if (!ok) cell->env.kind = RV_KIND_VOID;
        uint32_t destination = cell->env.destination; /* read before the cell is the consumer's */
        rv_store_release_dev_u32(&cell->seq, ctx->send_pos[i] + 1);
        rv_mark_work(ctx->g, destination);
    }
    if (ok) ctx->cb->k2k_sent += ctx->send_count + ctx->routed_count;
    /* the routed sends lie in the outbox from its tail on; the reply goes after them */
    uint32_t tail = ctx->cb->outbox_tail;
    uint32_t publish = ok ? tail + ctx->routed_count : tail;
    ctx->send_count = 0;
    ctx->routed_count = 0;
    ctx->reply_forwarded = 0;
    if (ctx->reply_staged) {
        if (ok) {
            rv_copy_envelope(rv_outbox_cell(ctx->g, ctx->slot, publish), &ctx->reply);
            if (ctx->reply_bulk) ctx->g->actors[ctx->slot].outbox_bulk_tail = ctx->reply_bulk_end;
            publish += 1;
        }
        ctx->reply_staged = 0;
        ctx->reply_bulk = 0;
    }
    if (publish != tail) {
        rv_store_release_u32(&ctx->cb->outbox_tail, publish);
        out |= RV_STEP_REPLIED;
    }
    return out;
}

/* ------------------------------------------------------------------------------------------------
 * Actor step.
 * ---------------------------------------------------------------------------------------------- */

/* Carries out block 0's request (Kill / Drain / Resume) at a message boundary, in any state. */
RV_FN void rv_actor_handle_request(const rv_grid_view *g, uint32_t slot, rv_control_block *cb, uint32_t seq) {
    uint32_t request = rv_load_relaxed_u32(&cb->request);
    uint32_t state = rv_load_relaxed_u32(&cb->state);
    if (request == RV_OP_KILL) {
        rv_store_relaxed_u64(&cb->stall_until_ns, 0);
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
    } else if (request == RV_OP_DRAIN && state == RV_STATE_ACTIVE) {
        rv_store_release_u32(&cb->state, RV_STATE_DRAINING);
    } else if (request == RV_OP_RESUME && state == RV_STATE_DRAINING) {
        rv_store_release_u32(&cb->state, RV_STATE_ACTIVE);
    }
    rv_store_release_u32(&cb->request_ack, seq);
    rv_raise_attention(g, slot);
}

RV_FN void rv_actor_fail(const rv_grid_view *g, uint32_t slot, rv_control_block *cb, int32_t code, uint32_t index) {
    cb->last_error = code;
    cb->failed_index = index;
    rv_store_release_u32(&cb->state, RV_STATE_FAILED);
    rv_raise_attention(g, slot);
}

RV_FN int rv_outbox_has_room(const rv_grid_view *g, rv_control_block *cb) {
    uint32_t head = rv_load_acquire_u32(&cb->outbox_head);
    uint32_t used = cb->outbox_tail - head;
    return used < g->outbox_capacity;
}

/* A host message is well formed: a user message for this slot, its payload inline or in the slot's inbox bulk
 * area (a reference that names bytes outside that area is refused). */
RV_FN int rv_envelope_valid(const rv_grid_view *g, const rv_envelope *e, uint32_t slot) {
    if (e->kind != RV_KIND_USER && e->kind != RV_KIND_STATE && e->kind != RV_KIND_K2K) return 0;
    if (e->payload_len > RV_PAYLOAD_BYTES || e->destination != slot) return 0;
    /* a routed kernel-to-kernel message (the host delivers it here): inline only */
    if (e->kind == RV_KIND_K2K) return !(e->flags & RV_FLAG_BULK);
    return !(e->flags & RV_FLAG_BULK) || rv_bulk_at(g, g->inbox_bulk, slot, e) != 0;
}

/* The bytes a state read asks for: the state region's first N bytes when its inline payload is a u32 N (the
 * behaviour's declared state size), capped at the region; the whole region when the payload is empty. */
RV_FN uint32_t rv_state_read_len(const rv_grid_view *g, const rv_envelope *msg) {
    if (msg->payload_len < 4 || (msg->flags & RV_FLAG_BULK)) return g->state_bytes;
    uint32_t wanted = rv_read_u32(msg->payload);
    return wanted < g->state_bytes ? wanted : g->state_bytes;
}

/* The next message of a step: its context, and the actor's clock merged with the message's. */
RV_FN void rv_ctx_next(rv_actor_ctx *ctx, const rv_envelope *msg, uint64_t now) {
    ctx->msg = msg;
    ctx->hlc = rv_hlc_next(ctx->hlc, msg->hlc, now);
}

/* Runs the current message through the behaviour, or fails it with `injected` (when not RV_OK), and returns
 * the result. On RV_OK the message is counted as processed and nothing is published yet: the caller consumes
 * the message, then publishes what it staged (rv_finish_message(ctx, 1)), so a host that has read the reply
 * sees the message counted and consumed (both are ordered before the outbox tail's release). Otherwise what
 * the behaviour staged is voided here. */
RV_FN int rv_actor_run(const rv_grid_view *g, rv_control_block *cb, rv_actor_ctx *ctx, int injected) {
    int rc = injected != RV_OK ? injected : rv_dispatch(g, cb->behaviour, ctx, ctx->msg);
    if (rc == RV_OK) {
        rv_store_relaxed_u64(&cb->messages_processed, cb->messages_processed + 1);
    } else {
        rv_finish_message(ctx, 0);
    }
    return rc;
}

/* The behaviour asked to stall (rv_stall_for): the step ends at once. */
RV_FN int rv_stall_requested(const rv_control_block *cb) { return rv_load_relaxed_u64(&cb->stall_until_ns) != 0; }

/* Gives a consumed kernel-to-kernel cell back to its producers, and its bulk bytes if it had any (voided sends
 * included: their bytes were reserved too). */
RV_FN void rv_k2k_release(const rv_grid_view *g, rv_k2k_meta *meta, rv_k2k_cell *cell, uint32_t khead) {
    if (cell->env.flags & RV_FLAG_BULK) rv_store_release_dev_u32(&meta->bulk_head, rv_bulk_ref_of(&cell->env).end);
    rv_store_release_dev_u32(&cell->seq, khead + g->k2k_capacity);
    meta->head = khead + 1;
}

RV_FN uint32_t rv_actor_init(const rv_grid_view *g, uint32_t slot, rv_control_block *cb); /* block 0's section */

/* True if a kernel-to-kernel message waits in `slot`'s ring (local region only). */
RV_FN int rv_k2k_waiting(const rv_grid_view *g, uint32_t slot) {
    uint32_t khead = g->k2k_meta[slot].head;
    return rv_load_acquire_dev_u32(&rv_k2k_cell_at(g, slot, khead)->seq) == khead + 1;
}

/* Advances the slot's heartbeat (the control block holds a copy of the actor record's count). */
RV_FN void rv_beat(rv_control_block *cb, rv_actor_record *ar) {
    ar->beats += 1;
    rv_store_relaxed_u64(&cb->heartbeat, ar->beats);
}

/* The idle step: if nothing the slot depends on moved since its last full step (host_seq: one shared-region
 * load; device_seq and the kernel-to-kernel ring: local), it returns at once; an Active slot beats at most once
 * per RV_IDLE_BEAT_NS. Returns 1 if the step is done. */
RV_FN int rv_actor_idle(const rv_grid_view *g, rv_control_block *cb, rv_actor_record *ar, uint32_t slot,
                        uint32_t host_seq, uint32_t device_seq) {
    if (ar->quiet == RV_QUIET_NO || host_seq != ar->seen_host_seq || device_seq != ar->seen_device_seq) return 0;
    if (ar->quiet == RV_QUIET_ACTIVE) {
        /* the ring is the actor's while it runs (block 0's while the slot is stopped: not read then) */
        if (rv_k2k_waiting(g, slot)) return 0;
        uint64_t now = rv_grid_now_ns(g);
        if (now >= ar->next_beat_ns) {
            /* an injected device stall stops every heartbeat (read here, at the idle beat rate only) */
            if (rv_load_acquire_u32(&g->header->device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) return 1;
            ar->next_beat_ns = now + RV_IDLE_BEAT_NS;
            rv_beat(cb, ar);
        }
    }
    return 1;
}

RV_STEP_API uint32_t rv_actor_step(const rv_grid_view *g, uint32_t slot, uint32_t budget) {
    if (slot >= g->slot_count) return 0;
    rv_control_block *cb = &g->blocks[slot];
    rv_actor_record *ar = &g->actors[slot];
    /* Both sequence numbers first: whatever is published after they are read makes the next step a full one. */
    uint32_t host_seq = rv_load_acquire_u32(&cb->host_seq);
    uint32_t device_seq = rv_load_acquire_dev_u32(&g->sv[slot].device_seq);
    if (rv_actor_idle(g, cb, ar, slot, host_seq, device_seq)) return 0;
    ar->quiet = RV_QUIET_NO;
    ar->seen_host_seq = host_seq;
    ar->seen_device_seq = device_seq;
    if (rv_load_acquire_u32(&g->header->device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) return 0;
    /* A wedged actor is stuck inside its behaviour: it acknowledges nothing, not even a kill. */
    if (rv_load_acquire_u32(&cb->fault_flags) & RV_FAULT_WEDGE) return 0;
    uint32_t out = 0;
    uint32_t seq = rv_load_acquire_u32(&cb->request_seq);
    if (seq != rv_load_relaxed_u32(&cb->request_ack)) {
        rv_actor_handle_request(g, slot, cb, seq);
        out |= RV_STEP_PROGRESS | RV_STEP_ATTENTION;
    }
    uint32_t state = rv_load_acquire_u32(&cb->state);
    if (state == RV_STATE_INITIALIZING) return out | rv_actor_init(g, slot, cb);
    if (state != RV_STATE_ACTIVE && state != RV_STATE_DRAINING) {
        if (out == 0) ar->quiet = RV_QUIET_STOPPED;
        return out;
    }
    /* The inbox tail before the fault bits: the host writes a fault before the messages it sends after it, so
     * a message seen here is seen with every fault injected before it was sent. */
    uint32_t tail = rv_load_acquire_u32(&cb->inbox_tail);
    uint32_t faults = rv_load_acquire_u32(&cb->fault_flags);
    if (faults & RV_FAULT_STALL) return out;
    uint64_t stall_until = rv_load_relaxed_u64(&cb->stall_until_ns);
    if (stall_until != 0) {
        if (rv_grid_now_ns(g) < stall_until) return out;
        rv_store_relaxed_u64(&cb->stall_until_ns, 0);
    }

    rv_actor_ctx ctx;
    rv_ctx_init(&ctx, g, slot, 0, 0);

    uint32_t done = 0;
    uint32_t head = cb->inbox_head;
    uint32_t limit = tail;
    if (state == RV_STATE_DRAINING) limit = rv_load_relaxed_u32(&cb->drain_until);
    if ((uint32_t)(tail - head) > g->inbox_capacity || (uint32_t)(limit - head) > g->inbox_capacity) {
        /* The host published an impossible index: refuse to read anything and report. */
        rv_actor_fail(g, slot, cb, RV_ERR_BAD_ENVELOPE, RV_NO_INDEX);
        return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    int stalled = 0;
    uint64_t now = rv_grid_now_ns(g);

    /* Kernel-to-kernel inbox first: what other actors sent before the host's next message is seen first. */
    rv_k2k_meta *meta = &g->k2k_meta[slot];
    int k2k_pending = 0;
    while (!stalled) {
        uint32_t khead = meta->head;
        rv_k2k_cell *cell = rv_k2k_cell_at(g, slot, khead);
        if (rv_load_acquire_dev_u32(&cell->seq) != khead + 1) break;
        if (done >= budget || !rv_outbox_has_room(g, cb)) {
            k2k_pending = 1;
            break;
        }
        if (cell->env.kind == RV_KIND_K2K) {
            rv_ctx_next(&ctx, &cell->env, now);
            int rc = rv_actor_run(g, cb, &ctx, RV_OK);
            if (rc == RV_STALL) {
                stalled = 1;
                break;
            }
            if (rc != RV_OK) {
                /* The message is consumed: answered with the failure code if someone waits for an answer
                 * (room was checked above), counted as dropped otherwise. */
                if (cell->env.flags & RV_FLAG_NO_REPLY) {
                    cb->k2k_dropped += 1;
                } else {
                    rv_reply_error(&ctx, rc, slot);
                    out |= rv_finish_message(&ctx, 1);
                }
                rv_k2k_release(g, meta, cell, khead);
                cb->hlc = ctx.hlc;
                rv_actor_fail(g, slot, cb, rc, RV_NO_INDEX);
                return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
            }
            cb->k2k_received += 1;
            rv_k2k_release(g, meta, cell, khead);
            out |= rv_finish_message(&ctx, 1);
        } else {
            rv_k2k_release(g, meta, cell, khead); /* a voided send: skipped */
        }
        done += 1;
        if (rv_stall_requested(cb)) {
            stalled = 1;
            break;
        }
    }

    /* Host inbox. */
    while (!stalled && done < budget && head != limit) {
        if (!rv_outbox_has_room(g, cb)) break;
        /* The host's cell, read once with 16-byte loads (on a GPU it is across PCIe); the behaviour reads the copy. */
        rv_envelope copy;
        rv_copy16_from_host(&copy, rv_inbox_cell(g, slot, head), sizeof(rv_envelope) / 16);
        const rv_envelope *msg = &copy;
        rv_ctx_next(&ctx, msg, now);
        /* One injected fault per fault_seq. Injected corruption: this message is handled as if its header were
         * corrupt (the inbox cell is the host's and is not written). */
        uint32_t fault_seq = rv_load_acquire_u32(&cb->fault_seq);
        int corrupt = (faults & RV_FAULT_CORRUPT_NEXT) && fault_seq != cb->fault_ack;
        if (corrupt) cb->fault_ack = fault_seq;
        if (corrupt || !rv_envelope_valid(g, msg, slot)) {
            cb->bad_envelopes += 1;
            rv_reply_error(&ctx, RV_ERR_BAD_ENVELOPE, msg->kind);
            out |= rv_finish_message(&ctx, 1);
            head += 1;
            rv_store_release_u32(&cb->inbox_head, head);
            done += 1;
            continue;
        }
        if (msg->kind == RV_KIND_STATE) {
            /* A copy of the state between two messages, answered in order; not counted as processed. A state
             * larger than a reply may carry is answered with RV_ERR_PAYLOAD_TOO_LARGE. */
            uint32_t len = rv_state_read_len(g, msg);
            int rc = rv_stage_reply(&ctx, RV_KIND_REPLY, rv_state_region(g, slot), len);
            if (rc == RV_ERR_OUTBOX_FULL) break; /* offered again once the host has read earlier replies */
            if (rc != RV_OK) rv_reply_error(&ctx, rc, len);
            head += 1;
            rv_store_release_u32(&cb->inbox_head, head);
            out |= rv_finish_message(&ctx, 1);
            done += 1;
            continue;
        }
        int injected = RV_OK;
        if ((faults & RV_FAULT_CRASH_NEXT) && fault_seq != cb->fault_ack) {
            cb->fault_ack = fault_seq;
            injected = RV_ERR_INJECTED;
        }
        int rc = rv_actor_run(g, cb, &ctx, injected);
        if (rc == RV_STALL) {
            stalled = 1;
            break;
        }
        if (rc != RV_OK) {
            cb->hlc = ctx.hlc;
            rv_actor_fail(g, slot, cb, rc, head);
            return out | RV_STEP_ATTENTION | RV_STEP_PROGRESS;
        }
        if (msg->kind == RV_KIND_K2K) cb->k2k_received += 1;
        head += 1;
        rv_store_release_u32(&cb->inbox_head, head);
        out |= rv_finish_message(&ctx, 1);
        done += 1;
        /* A stall requested by this message takes effect at once. */
        if (rv_stall_requested(cb)) {
            stalled = 1;
            break;
        }
    }

    cb->hlc = ctx.hlc;
    if (done > 0) out |= RV_STEP_PROGRESS;
    if (!stalled || done > 0) rv_beat(cb, ar);
    if (state == RV_STATE_DRAINING && head == limit && !k2k_pending && !stalled) {
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
        rv_raise_attention(g, slot);
        out |= RV_STEP_ATTENTION | RV_STEP_PROGRESS;
    }
    /* Nothing done, nothing waiting, no stall: idle steps until host_seq, device_seq or the ring moves. */
    if (out == 0 && !stalled && !k2k_pending && head == limit && state == RV_STATE_ACTIVE) {
        ar->quiet = RV_QUIET_ACTIVE;
        ar->next_beat_ns = rv_grid_now_ns(g) + RV_IDLE_BEAT_NS;
    }
    return out;
}

/* ------------------------------------------------------------------------------------------------
 * Block 0: the device supervisor.
 * ---------------------------------------------------------------------------------------------- */
RV_FN uint32_t rv_event_room(const rv_grid_view *g) {
    rv_grid_header *h = g->header;
    uint32_t head = rv_load_acquire_u32(&h->event_head);
    uint32_t used = rv_load_relaxed_u32(&h->event_tail) - head;
    return used >= g->event_capacity ? 0 : g->event_capacity - used;
}

RV_FN void rv_publish_processed(const rv_grid_view *g, uint32_t kind, uint32_t slot, const rv_command *cmd,
                                int32_t code, uint32_t inbox_head, uint32_t failed_index, uint32_t k2k_dropped,
                                uint64_t messages_processed) {
    rv_grid_header *h = g->header;
    uint32_t tail = rv_load_relaxed_u32(&h->event_tail);
    int in_range = slot < g->slot_count;
    rv_control_block *cb = in_range ? &g->blocks[slot] : 0;
    /* Built locally, then copied into the ring with 16-byte stores. */
    rv_event local;
    rv_event *e = &local;
    e->kind = kind;
    e->slot = slot;
    e->generation = in_range ? cb->generation : 0;
    e->state = in_range ? rv_load_relaxed_u32(&cb->state) : 0;
    e->code = code;
    e->inbox_head = inbox_head;
    e->failed_index = failed_index;
    e->k2k_dropped = k2k_dropped;
    e->cmd_id = cmd ? cmd->cmd_id : 0;
    e->time_ns = rv_grid_now_ns(g);
    e->messages_processed = messages_processed;
    e->op = cmd ? cmd->op : RV_OP_NONE;
    int starts = kind == RV_EVT_CREATED || kind == RV_EVT_RESTARTED || kind == RV_EVT_CREATE_FAILED;
    e->inbox_start = cmd && starts ? cmd->inbox_index : 0;
    rv_copy16(&g->events[tail & (g->event_capacity - 1)], &local, sizeof(rv_event) / 16);
    rv_store_release_u32(&h->event_tail, tail + 1);
    rv_store_relaxed_u64(&h->events_published, rv_load_relaxed_u64(&h->events_published) + 1);
}

/* Publishes an event carrying the slot's current messages_processed. */
RV_FN void rv_publish(const rv_grid_view *g, uint32_t kind, uint32_t slot, const rv_command *cmd, int32_t code,
                      uint32_t inbox_head, uint32_t failed_index, uint32_t k2k_dropped) {
    uint64_t processed = slot < g->slot_count ? rv_load_relaxed_u64(&g->blocks[slot].messages_processed) : 0;
    rv_publish_processed(g, kind, slot, cmd, code, inbox_head, failed_index, k2k_dropped, processed);
}

RV_FN void rv_reject(const rv_grid_view *g, const rv_command *cmd, int32_t code) {
    rv_publish(g, RV_EVT_REJECTED, cmd->slot, cmd, code, RV_NO_INDEX, RV_NO_INDEX, 0);
}

/* Empties the kernel-to-kernel ring of a slot that is not running (block 0 acts as its consumer and as its
 * outbox producer). A message someone waits an answer for is answered with RV_ERR_TARGET_GONE while the
 * outbox has room; when it has none, the rest stays queued for the next incarnation (which answers it).
 * Notifications are dropped and counted. Returns how many messages were dropped. */
RV_FN uint32_t rv_reclaim_k2k(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    rv_k2k_meta *meta = &g->k2k_meta[slot];
    uint32_t dropped = 0;
    uint32_t tail = cb->outbox_tail;
    uint32_t room = g->outbox_capacity - (tail - rv_load_acquire_u32(&cb->outbox_head));
    for (;;) {
        uint32_t khead = meta->head;
        rv_k2k_cell *cell = rv_k2k_cell_at(g, slot, khead);
        if (rv_load_acquire_dev_u32(&cell->seq) != khead + 1) break;
        if (cell->env.kind == RV_KIND_K2K) {
            if (cell->env.flags & RV_FLAG_NO_REPLY) {
                dropped += 1;
            } else {
                if (room == 0) break;
                rv_envelope local;
                rv_zero16(&local, sizeof(local) / 16);
                rv_envelope *e = &local;
                rv_error_payload p;
                p.code = RV_ERR_TARGET_GONE;
                p.detail = slot;
                e->kind = RV_KIND_ERROR;
                e->flags = 0;
                e->payload_len = (uint16_t)sizeof(p);
                e->source = slot;
                e->destination = RV_HOST_ENDPOINT;
                e->generation = cb->generation;
                e->correlation = cell->env.correlation;
                e->hlc = cb->hlc;
                rv_copy_bytes(e->payload, &p, sizeof(p));
                rv_copy_envelope(rv_outbox_cell(g, slot, tail), &local);
                tail += 1;
                room -= 1;
            }
        }
        rv_k2k_release(g, meta, cell, khead);
    }
    if (tail != cb->outbox_tail) rv_store_release_u32(&cb->outbox_tail, tail);
    cb->k2k_dropped += dropped;
    return dropped;
}

/* (Re)creates a slot that is not running: new generation, zeroed state, the behaviour's init. */
RV_FN void rv_sv_create(const rv_grid_view *g, const rv_command *cmd, uint32_t success_kind) {
    uint32_t slot = cmd->slot;
    rv_control_block *cb = &g->blocks[slot];
    rv_sv_record *rec = &g->sv[slot];
    uint32_t old_head = cb->inbox_head;
    uint32_t old_failed = cb->failed_index;
    uint64_t old_processed = cb->messages_processed; /* reported with Created/Restarted: the previous incarnation's */
    rv_store_relaxed_u32(&cb->state, RV_STATE_INITIALIZING);
    rv_zero16(rv_state_region(g, slot), g->state_bytes / 16); /* state_bytes is a multiple of 64 */
    uint32_t dropped = rv_reclaim_k2k(g, slot);
    cb->generation += 1;
    rv_store_relaxed_u64(&cb->heartbeat, 0);
    rv_store_relaxed_u64(&cb->messages_processed, 0);
    cb->last_error = 0;
    cb->behaviour = cmd->behaviour;
    cb->failed_index = RV_NO_INDEX;
    cb->k2k_sent = 0;
    cb->k2k_received = 0;
    cb->bad_envelopes = 0;
    cb->stall_until_ns = 0;
    cb->fault_ack = rv_load_acquire_u32(&cb->fault_seq);
    cb->hlc = rv_hlc_next(cb->hlc, 0, rv_grid_now_ns(g));
    /* The new incarnation starts at the host's cutoff, or after what the old one already consumed (it may
     * have consumed messages sent after the host submitted the restart, before it saw the kill; those must
     * not be processed twice). A message it failed on was handed back to the host: skip it too. */
    uint32_t consumed_end = old_head;
    if (old_failed != RV_NO_INDEX && old_failed == old_head) consumed_end = old_head + 1;
    uint32_t start = cmd->inbox_index;
    if ((int32_t)(consumed_end - start) > 0) start = consumed_end;
    rv_store_release_u32(&cb->inbox_head, start);

    /* The behaviour's init runs on the actor's own block (rv_actor_init): a slow or stuck init never holds
     * block 0. The command and what its event will say wait in block 0's record; pending_op is published last.
     * The command is also kept as the incarnation's start (a granted restart repeats it); its inbox index
     * becomes the one the incarnation starts at (the event's inbox_start). */
    if (&rec->pending != cmd) rec->pending = *cmd;
    rec->pending.inbox_index = start;
    rec->start = rec->pending;
    rec->init_event = success_kind;
    rec->init_old_head = old_head;
    rec->init_old_failed = old_failed;
    rec->init_dropped = dropped;
    rec->init_old_processed = old_processed;
    rv_store_release_dev_u32(&rec->pending_op, RV_OP_INIT);
}

/* On the actor's block: runs the behaviour's init for a creation block 0 prepared (state Initializing, pending_op
 * RV_OP_INIT), then makes the slot Active, or Failed with the init's code, and raises attention (block 0
 * publishes the event). */
RV_FN uint32_t rv_actor_init(const rv_grid_view *g, uint32_t slot, rv_control_block *cb) {
    rv_sv_record *rec = &g->sv[slot];
    if (rv_load_acquire_dev_u32(&rec->pending_op) != RV_OP_INIT) return 0; /* block 0 is not done preparing */
    const rv_command *cmd = &rec->pending;
    rv_envelope init;
    rv_zero16(&init, sizeof(init) / 16);
    init.kind = RV_KIND_INIT;
    init.flags = RV_FLAG_NO_REPLY;
    init.payload_len = (uint16_t)cmd->init_len;
    init.source = RV_HOST_ENDPOINT;
    init.destination = slot;
    init.generation = cb->generation;
    init.correlation = cmd->cmd_id;
    init.hlc = cb->hlc;
    rv_copy_bytes(init.payload, cmd->init, cmd->init_len);
    rv_actor_ctx ctx;
    rv_ctx_init(&ctx, g, slot, 1, &init);
    int rc = rv_dispatch(g, cmd->behaviour, &ctx, &init);
    if (rc == RV_STALL) rc = RV_ERR_NOT_ALLOWED;
    /* The init's outcome, apart from the state: once Active, this block may run the incarnation on its queued
     * messages, and fail, before block 0 reports the creation (ordered before block 0's acquire of the state). */
    rec->init_result = rc;
    if (rc == RV_OK) {
        rv_store_release_u32(&cb->state, RV_STATE_ACTIVE);
    } else {
        cb->last_error = rc;
        rv_store_release_u32(&cb->state, RV_STATE_FAILED);
    }
    rv_raise_attention(g, slot);
    return RV_STEP_PROGRESS | RV_STEP_ATTENTION;
}

/* Block 0, on the attention an init raised: the creation's event, Created/Restarted or CreateFailed, by the init's
 * own result (the slot may be Failed by then because the new incarnation crashed on a message: the caller reports
 * that next, as the incarnation's failure). */
RV_FN void rv_sv_init_done(const rv_grid_view *g, uint32_t slot) {
    rv_sv_record *rec = &g->sv[slot];
    rv_store_release_dev_u32(&rec->pending_op, RV_OP_NONE); /* the actor reads it (rv_actor_init) */
    int32_t code = rec->init_result;
    rec->reported_state = code == RV_OK ? RV_STATE_ACTIVE : RV_STATE_FAILED;
    uint32_t kind = code == RV_OK ? rec->init_event : RV_EVT_CREATE_FAILED;
    rv_publish_processed(g, kind, slot, &rec->pending, code, rec->init_old_head, rec->init_old_failed,
                         rec->init_dropped, rec->init_old_processed);
}

RV_FN void rv_sv_request(const rv_grid_view *g, const rv_command *cmd, uint32_t op) {
    rv_control_block *cb = &g->blocks[cmd->slot];
    rv_sv_record *rec = &g->sv[cmd->slot];
    rv_store_release_dev_u32(&rec->pending_op, cmd->op);
    rec->pending = *cmd;
    if (op == RV_OP_DRAIN) rv_store_relaxed_u32(&cb->drain_until, cmd->inbox_index);
    rv_store_relaxed_u32(&cb->request, op);
    rv_store_release_u32(&cb->request_seq, cb->request_seq + 1);
}

/* A host-given inbox index must lie within one inbox capacity of the device's head, on either side. */
RV_FN int rv_index_near(const rv_grid_view *g, uint32_t index, uint32_t head) {
    return (uint32_t)(index - head) <= g->inbox_capacity || (uint32_t)(head - index) <= g->inbox_capacity;
}

RV_FN int rv_init_valid(const rv_grid_view *g, const rv_command *cmd) {
    if (!rv_behaviour_known(g, cmd->behaviour)) return RV_ERR_UNKNOWN_BEHAVIOUR;
    if (cmd->init_len > RV_INIT_BYTES) return RV_ERR_BAD_COMMAND;
    return RV_OK;
}

/* Validates and executes one command. Publishes exactly one event now, or one when the actor acknowledges. */
RV_FN void rv_sv_execute(const rv_grid_view *g, const rv_command *cmd) {
    if (cmd->slot >= g->slot_count) return rv_reject(g, cmd, RV_ERR_SLOT_RANGE);
    if (cmd->op < RV_OP_CREATE || cmd->op > RV_OP_RESUME) return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
    rv_control_block *cb = &g->blocks[cmd->slot];
    rv_sv_record *rec = &g->sv[cmd->slot];
    if (rec->pending_op != RV_OP_NONE) return rv_reject(g, cmd, RV_ERR_BUSY);
    if (cmd->expected_generation != cb->generation) return rv_reject(g, cmd, RV_ERR_STALE_GENERATION);
    uint32_t state = rv_load_acquire_u32(&cb->state);
    int running = state == RV_STATE_ACTIVE || state == RV_STATE_DRAINING;
    int rc;
    switch (cmd->op) {
    case RV_OP_CREATE:
        if (state != RV_STATE_DORMANT && state != RV_STATE_TERMINATED)
            return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((rc = rv_init_valid(g, cmd)) != RV_OK) return rv_reject(g, cmd, rc);
        if (!rv_index_near(g, cmd->inbox_index, cb->inbox_head)) return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        return rv_sv_create(g, cmd, RV_EVT_CREATED);
    case RV_OP_RESTART:
        if (state == RV_STATE_DORMANT || state == RV_STATE_INITIALIZING)
            return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((rc = rv_init_valid(g, cmd)) != RV_OK) return rv_reject(g, cmd, rc);
        if (!rv_index_near(g, cmd->inbox_index, rv_load_acquire_u32(&cb->inbox_head)))
            return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        if (running) return rv_sv_request(g, cmd, RV_OP_KILL);
        return rv_sv_create(g, cmd, RV_EVT_RESTARTED);
    case RV_OP_KILL:
        if (running) return rv_sv_request(g, cmd, RV_OP_KILL);
        if (state != RV_STATE_FAILED) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        rv_store_release_u32(&cb->state, RV_STATE_TERMINATED);
        rec->reported_state = RV_STATE_TERMINATED;
        return rv_publish(g, RV_EVT_KILLED, cmd->slot, cmd, cb->last_error, cb->inbox_head, cb->failed_index,
                          rv_reclaim_k2k(g, cmd->slot));
    case RV_OP_DRAIN:
        if (state != RV_STATE_ACTIVE) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        if ((uint32_t)(cmd->inbox_index - rv_load_acquire_u32(&cb->inbox_head)) > g->inbox_capacity)
            return rv_reject(g, cmd, RV_ERR_BAD_COMMAND);
        return rv_sv_request(g, cmd, RV_OP_DRAIN);
    default: /* RV_OP_RESUME */
        if (state != RV_STATE_DRAINING) return rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        return rv_sv_request(g, cmd, RV_OP_RESUME);
    }
}

/* Block 0 changed something of `slot` that its actor must notice (a request, a re-creation): the actor's next
 * step is a full one. */
RV_FN void rv_touch_slot(const rv_grid_view *g, uint32_t slot) {
    rv_sv_record *rec = &g->sv[slot];
    rv_store_release_dev_u32(&rec->device_seq, rec->device_seq + 1);
    rv_mark_work(g, slot);
}

/* The host granted a restart in place of the incarnation that just failed in `slot` (its restart_grant names the
 * generation), block 0 knows how it was started, and the host's inbox tail is a plausible index. */
RV_FN int rv_restart_granted(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    return g->sv[slot].start.op != RV_OP_NONE && rv_load_acquire_u32(&cb->restart_grant) == cb->generation &&
           rv_index_near(g, rv_load_acquire_u32(&cb->inbox_tail), cb->inbox_head);
}

/* Block 0 restarts a failed slot in place under the host's grant, without waiting for the host: the command
 * that started the incarnation, again, as a Restart with a cmd_id of its own (RV_GRANTED_CMD). The messages
 * queued up to `tail`, the host's tail read before the Failed event was published, are the host's to hand back;
 * those it sends once it has read the event are the new incarnation's (as for a restart the host submits). The
 * host must not reuse the cells of the ones it hands back before it has read them: grant_floor says where they
 * start, published before the new inbox head. */
RV_FN void rv_sv_granted_restart(const rv_grid_view *g, uint32_t slot, uint32_t tail) {
    rv_control_block *cb = &g->blocks[slot];
    rv_command cmd = g->sv[slot].start;
    uint32_t next = cb->generation + 1;
    cmd.op = RV_OP_RESTART;
    cmd.slot = slot;
    cmd.expected_generation = cb->generation;
    cmd.cmd_id = RV_GRANTED_CMD | ((uint64_t)slot << 32) | (uint64_t)next;
    cmd.inbox_index = tail;
    rv_store_relaxed_u32(&cb->grant_floor, cb->inbox_head);
    rv_store_release_u32(&cb->grant_floor_gen, next);
    rv_sv_create(g, &cmd, RV_EVT_RESTARTED);
}

/* Looks at a slot whose actor raised attention: completes a pending command, reports a state change. */
RV_FN void rv_sv_attend(const rv_grid_view *g, uint32_t slot) {
    rv_control_block *cb = &g->blocks[slot];
    rv_sv_record *rec = &g->sv[slot];
    if (rec->pending_op == RV_OP_INIT) {
        if (rv_load_acquire_u32(&cb->state) == RV_STATE_INITIALIZING) return;
        rv_sv_init_done(g, slot); /* then a failure of the new incarnation, below */
    }
    if (rec->pending_op != RV_OP_NONE &&
        rv_load_acquire_u32(&cb->request_ack) == rv_load_relaxed_u32(&cb->request_seq)) {
        const rv_command *cmd = &rec->pending;
        uint32_t op = rec->pending_op;
        uint32_t state = rv_load_acquire_u32(&cb->state);
        rv_store_release_dev_u32(&rec->pending_op, RV_OP_NONE); /* the actor reads it (rv_actor_init) */
        if (op == RV_OP_KILL) {
            rec->reported_state = RV_STATE_TERMINATED;
            uint32_t dropped = rv_reclaim_k2k(g, slot);
            rv_publish(g, RV_EVT_KILLED, slot, cmd, cb->last_error, cb->inbox_head, cb->failed_index, dropped);
        } else if (op == RV_OP_RESTART) {
            rv_sv_create(g, cmd, RV_EVT_RESTARTED);
        } else if (op == RV_OP_DRAIN && (state == RV_STATE_DRAINING || state == RV_STATE_TERMINATED)) {
            rec->reported_state = RV_STATE_DRAINING;
            rv_publish(g, RV_EVT_DRAINING, slot, cmd, 0, rv_load_acquire_u32(&cb->inbox_head), RV_NO_INDEX, 0);
        } else if (op == RV_OP_RESUME && state == RV_STATE_ACTIVE) {
            rec->reported_state = RV_STATE_ACTIVE;
            rv_publish(g, RV_EVT_RESUMED, slot, cmd, 0, rv_load_acquire_u32(&cb->inbox_head), RV_NO_INDEX, 0);
        } else {
            /* The actor failed before it could carry the request out: nothing changed by the command. */
            rv_reject(g, cmd, RV_ERR_ILLEGAL_TRANSITION);
        }
    }
    uint32_t state = rv_load_acquire_u32(&cb->state);
    if (state == rec->reported_state || rec->pending_op != RV_OP_NONE) return;
    if (state == RV_STATE_FAILED) {
        /* The Failed event says whether a granted restart follows (op RV_OP_RESTART): the host learns it from
         * the same record as the failure, whatever it wrote to restart_grant meanwhile. */
        int granted = rv_restart_granted(g, slot);
        /* Read before the event is out: a message the host writes after it has read the event is not below it. */
        uint32_t tail = rv_load_acquire_u32(&cb->inbox_tail);
        rv_command note;
        rv_zero16(&note, sizeof(note) / 16);
        note.op = granted ? RV_OP_RESTART : RV_OP_NONE;
        rv_publish(g, RV_EVT_FAILED, slot, &note, cb->last_error, cb->inbox_head, cb->failed_index, 0);
        if (granted) rv_sv_granted_restart(g, slot, tail);
    } else if (state == RV_STATE_TERMINATED && rec->reported_state == RV_STATE_DRAINING) {
        rv_publish(g, RV_EVT_DRAINED, slot, 0, 0, cb->inbox_head, RV_NO_INDEX, rv_reclaim_k2k(g, slot));
    }
    rec->reported_state = state;
}

/* Most events one rv_sv_attend call can publish. */
#define RV_EVENTS_PER_ATTEND 3u

/* Block 0's heartbeat: counted in the local region, its copy stored into the shared header (a store, never a
 * read of mapped memory). It moves with every step, every slot attended and every command carried out, so a
 * block 0 busy with a burst (each record crosses PCIe on a GPU) is never taken for a dead one. */
RV_FN void rv_sv_beat(const rv_grid_view *g) {
    uint64_t beats = g->local_header->supervisor_beats + 1;
    g->local_header->supervisor_beats = beats;
    rv_store_relaxed_u64(&g->header->supervisor_heartbeat, beats);
}

RV_STEP_API uint32_t rv_supervisor_step(const rv_grid_view *g) {
    rv_grid_header *h = g->header;
    uint32_t out = 0;
    /* An injected device stall or halt: block 0 does nothing, and its heartbeat stops. */
    if (rv_load_acquire_u32(&h->device_faults) & (RV_DEVICE_STALL | RV_DEVICE_HALT)) return 0;
    rv_sv_beat(g);

    /* 1. Slots that raised attention: the words the summary marks (a summary bit is cleared before its word is
     * taken, see rv_raise_attention). */
    uint32_t *summary = rv_attention_summary(g);
    uint32_t summary_words = (rv_attention_words(g->slot_count) + 31) / 32;
    for (uint32_t sw = 0; sw < summary_words; ++sw) {
        if (rv_load_relaxed_dev_u32(&summary[sw]) == 0) continue;
        uint32_t marked = rv_exchange_u32(&summary[sw], 0);
        while (marked != 0) {
            uint32_t w = sw * 32 + rv_ctz_u32(marked);
            marked &= marked - 1;
            uint32_t bits = rv_exchange_u32(&g->attention[w], 0);
            while (bits != 0) {
                if (rv_event_room(g) < RV_EVENTS_PER_ATTEND) {
                    /* Keep the rest for the next step: this word's bits, and the words not looked at yet. */
                    rv_fetch_or_u32(&g->attention[w], bits);
                    rv_fetch_or_u32(&summary[sw], marked | (1u << (w & 31u)));
                    return out;
                }
                uint32_t b = rv_ctz_u32(bits);
                bits &= bits - 1;
                rv_sv_attend(g, w * 32 + b);
                rv_touch_slot(g, w * 32 + b);
                rv_sv_beat(g);
                out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
            }
        }
    }

    /* 2. Commands, while an event can be published for each, at most RV_COMMANDS_PER_STEP of them: a burst of
     * commands does not keep block 0 from its other duties, and its heartbeat moves with every command (each
     * can take a while on a GPU, where the command and event rings are in host memory across PCIe). */
    for (uint32_t n = 0; n < RV_COMMANDS_PER_STEP; ++n) {
        uint32_t head = rv_load_relaxed_u32(&h->command_head);
        uint32_t tail = rv_load_acquire_u32(&h->command_tail);
        if (head == tail) break;
        if (rv_event_room(g) < RV_EVENTS_PER_ATTEND) break;
        if ((uint32_t)(tail - head) > g->command_capacity) {
            /* An impossible producer index: reject it once and skip to it. */
            rv_command bogus;
            rv_zero_bytes(&bogus, sizeof(bogus));
            bogus.slot = RV_NO_INDEX;
            rv_reject(g, &bogus, RV_ERR_BAD_COMMAND);
            rv_store_release_u32(&h->command_head, tail);
            out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
            continue;
        }
        rv_command cmd;
        rv_copy16_from_host(&cmd, &g->commands[head & (g->command_capacity - 1)], sizeof(rv_command) / 16);
        rv_sv_execute(g, &cmd);
        if (cmd.slot < g->slot_count) rv_touch_slot(g, cmd.slot);
        rv_store_release_u32(&h->command_head, head + 1);
        rv_store_relaxed_u64(&h->commands_processed, rv_load_relaxed_u64(&h->commands_processed) + 1);
        rv_sv_beat(g);
        out |= RV_STEP_PROGRESS | RV_STEP_REPLIED;
    }
    return out;
}
