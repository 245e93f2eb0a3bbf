// Stall labels: what a request is doing ("GET /users/{id}") and, when it is traced, its W3C trace and span ids. Set
// once per scope (StallLabel.withValue), which takes an entry of this table and binds its id as a task-local of the
// request's task: every task started inside the scope (child tasks, unstructured tasks, Vapor's responder tasks)
// inherits that id. The watchdog reads a stalled task's id from its task-locals (task_locals.c) and the entry from
// here. An id is a 52-bit sequence number and the 12-bit slot it took, never reused, so an id that outlived its scope
// (in an unstructured task that outlived the request) finds no entry rather than another request's; and a scope
// takes any free slot (found from its sequence number's), so long-lived scopes in a row never make others drop.
#include "CStallmonConcurrency.h"

#include <stdatomic.h>
#include <string.h>

#define LABEL_SLOT_BITS 12
#define LABEL_SLOTS (1u << LABEL_SLOT_BITS)  // scopes open at once
#define LABEL_WORDS (CSTALLMON_LABEL_MAX_BYTES / 8)
#define TRACE_WORDS 3     // 16 bytes of trace id, 8 of span id

// 192 bytes, three cache lines of their own: scopes opened at once on different cores take neighbouring slots.
typedef struct {
    _Alignas(64) _Atomic uint64_t id;  // 0: free
    _Atomic uint32_t sequence;  // odd while the entry is written
    _Atomic uint32_t length;
    _Atomic uint32_t traced;
    _Atomic uint64_t words[LABEL_WORDS];
    _Atomic uint64_t trace[TRACE_WORDS];
} label_slot;

static label_slot g_labels[LABEL_SLOTS];
static _Atomic uint64_t g_next_sequence;
static _Atomic uint64_t g_labels_dropped;

// The writer's half of the slot's seqlock: the text and trace ids, or all empty. Async-signal-safe.
static void write_entry(label_slot *slot, const char *text, size_t length, const uint8_t *trace_id,
                        const uint8_t *span_id) {
    if (length > CSTALLMON_LABEL_MAX_BYTES) length = CSTALLMON_LABEL_MAX_BYTES;
    uint32_t sequence = atomic_load_explicit(&slot->sequence, memory_order_relaxed);
    atomic_store_explicit(&slot->sequence, sequence + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint64_t words[LABEL_WORDS] = {0};
    uint64_t trace[TRACE_WORDS] = {0};
    if (length > 0) memcpy(words, text, length);
    bool traced = trace_id != NULL && span_id != NULL;
    if (traced) {
        memcpy(trace, trace_id, 16);
        memcpy(&trace[2], span_id, 8);
    }
    for (int index = 0; index < LABEL_WORDS; index++) {
        atomic_store_explicit(&slot->words[index], words[index], memory_order_relaxed);
    }
    for (int index = 0; index < TRACE_WORDS; index++) {
        atomic_store_explicit(&slot->trace[index], trace[index], memory_order_relaxed);
    }
    atomic_store_explicit(&slot->length, (uint32_t)length, memory_order_relaxed);
    atomic_store_explicit(&slot->traced, traced ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&slot->sequence, sequence + 2, memory_order_release);
}

uint64_t cstallmon_label_open(const char *text, size_t length, const uint8_t *trace_id, const uint8_t *span_id) {
    uint64_t sequence = atomic_fetch_add_explicit(&g_next_sequence, 1, memory_order_relaxed) + 1;
    for (uint32_t probe = 0; probe < LABEL_SLOTS; probe++) {
        uint32_t index = (uint32_t)(sequence + probe) & (LABEL_SLOTS - 1);
        label_slot *slot = &g_labels[index];
        if (atomic_load_explicit(&slot->id, memory_order_relaxed) != 0) continue;
        uint64_t id = (sequence << LABEL_SLOT_BITS) | index;
        uint64_t expected = 0;
        if (atomic_compare_exchange_strong_explicit(&slot->id, &expected, id, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            write_entry(slot, text, length, trace_id, span_id);
            return id;
        }
    }
    atomic_fetch_add_explicit(&g_labels_dropped, 1, memory_order_relaxed);
    return 0;
}

void cstallmon_label_close(uint64_t id) {
    if (id == 0) return;
    label_slot *slot = &g_labels[id & (LABEL_SLOTS - 1)];
    if (atomic_load_explicit(&slot->id, memory_order_acquire) != id) return;
    // Emptied before it is given up: the slot's next entry is never shown with this one's text or trace.
    write_entry(slot, "", 0, NULL, NULL);
    uint64_t expected = id;
    atomic_compare_exchange_strong_explicit(&slot->id, &expected, 0, memory_order_acq_rel, memory_order_relaxed);
}

int cstallmon_label_lookup(uint64_t id, cstallmon_label_entry *out) {
    if (id == 0) return 0;
    label_slot *slot = &g_labels[id & (LABEL_SLOTS - 1)];
    for (int attempt = 0; attempt < 16; attempt++) {
        if (atomic_load_explicit(&slot->id, memory_order_acquire) != id) return 0;
        uint32_t before = atomic_load_explicit(&slot->sequence, memory_order_acquire);
        if (before & 1) continue;
        uint64_t words[LABEL_WORDS];
        uint64_t trace[TRACE_WORDS];
        for (int index = 0; index < LABEL_WORDS; index++) {
            words[index] = atomic_load_explicit(&slot->words[index], memory_order_relaxed);
        }
        for (int index = 0; index < TRACE_WORDS; index++) {
            trace[index] = atomic_load_explicit(&slot->trace[index], memory_order_relaxed);
        }
        uint32_t length = atomic_load_explicit(&slot->length, memory_order_relaxed);
        uint32_t traced = atomic_load_explicit(&slot->traced, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&slot->sequence, memory_order_relaxed) != before) continue;
        if (atomic_load_explicit(&slot->id, memory_order_relaxed) != id) return 0;
        if (length == 0 && !traced) return 0;  // being written or emptied: nothing to show
        memcpy(out->text, words, length);
        out->text[length] = 0;
        out->length = length;
        out->traced = traced ? 1 : 0;
        memcpy(out->trace_id, trace, 16);
        memcpy(out->span_id, &trace[2], 8);
        return 1;
    }
    return 0;
}

uint64_t cstallmon_labels_dropped(void) {
    return atomic_load_explicit(&g_labels_dropped, memory_order_relaxed);
}
