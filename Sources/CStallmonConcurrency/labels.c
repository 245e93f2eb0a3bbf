// Stall labels: what a task is doing ("GET /users/{id}"), set by the task itself for a scope (StallLabel.withValue)
// and read by the watchdog when that task's job stalls. The watchdog cannot read another task's task-locals, so the
// label also goes into this table, keyed by the task's address: open addressing over preallocated slots, each with
// its own seqlock. A task's entry lives exactly as long as its scope; a task's address is reused only after the task
// is freed, which happens after its scopes ended.
#include "CStallmonConcurrency.h"

#include <stdatomic.h>
#include <string.h>

#define LABEL_SLOTS 4096  // a power of two: labelled tasks in flight at once
#define LABEL_PROBES 64   // slots tried from a task's home slot
#define LABEL_WORDS (CSTALLMON_LABEL_MAX_BYTES / 8)

typedef struct {
    _Atomic uintptr_t task;
    _Atomic uint32_t sequence;  // odd while the text is written
    _Atomic uint32_t length;
    _Atomic uint64_t words[LABEL_WORDS];
} label_slot;

static label_slot g_labels[LABEL_SLOTS];
static _Atomic uint64_t g_labels_dropped;

static unsigned home_slot(uintptr_t task) {
    // Fibonacci hashing of the address without its alignment bits.
    return (unsigned)(((uint64_t)(task >> 4) * 0x9E3779B97F4A7C15ull) >> 52) & (LABEL_SLOTS - 1);
}

static void write_text(label_slot *slot, const char *text, size_t length) {
    if (length > CSTALLMON_LABEL_MAX_BYTES) length = CSTALLMON_LABEL_MAX_BYTES;
    uint32_t sequence = atomic_load_explicit(&slot->sequence, memory_order_relaxed);
    atomic_store_explicit(&slot->sequence, sequence + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint64_t words[LABEL_WORDS] = {0};
    memcpy(words, text, length);
    for (int index = 0; index < LABEL_WORDS; index++) {
        atomic_store_explicit(&slot->words[index], words[index], memory_order_relaxed);
    }
    atomic_store_explicit(&slot->length, (uint32_t)length, memory_order_relaxed);
    atomic_store_explicit(&slot->sequence, sequence + 2, memory_order_release);
}

int cstallmon_label_set(uintptr_t task, const char *text, size_t length) {
    if (task == 0) return -1;
    unsigned home = home_slot(task);
    for (unsigned probe = 0; probe < LABEL_PROBES; probe++) {
        label_slot *slot = &g_labels[(home + probe) & (LABEL_SLOTS - 1)];
        uintptr_t owner = atomic_load_explicit(&slot->task, memory_order_acquire);
        if (owner == task) {
            write_text(slot, text, length);
            return (int)((home + probe) & (LABEL_SLOTS - 1));
        }
    }
    for (unsigned probe = 0; probe < LABEL_PROBES; probe++) {
        unsigned index = (home + probe) & (LABEL_SLOTS - 1);
        label_slot *slot = &g_labels[index];
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong_explicit(&slot->task, &expected, task, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            write_text(slot, text, length);
            return (int)index;
        }
    }
    atomic_fetch_add_explicit(&g_labels_dropped, 1, memory_order_relaxed);
    return -1;
}

void cstallmon_label_clear(int slot, uintptr_t task) {
    if (slot < 0 || slot >= LABEL_SLOTS) return;
    if (atomic_load_explicit(&g_labels[slot].task, memory_order_acquire) != task) return;
    // Emptied before it is given up: the next owner's task is never shown with this task's text.
    write_text(&g_labels[slot], "", 0);
    uintptr_t expected = task;
    atomic_compare_exchange_strong_explicit(&g_labels[slot].task, &expected, 0, memory_order_acq_rel,
                                            memory_order_relaxed);
}

ssize_t cstallmon_label_read(uintptr_t task, char *out, size_t capacity) {
    if (task == 0 || capacity == 0) return -1;
    unsigned home = home_slot(task);
    for (unsigned probe = 0; probe < LABEL_PROBES; probe++) {
        label_slot *slot = &g_labels[(home + probe) & (LABEL_SLOTS - 1)];
        if (atomic_load_explicit(&slot->task, memory_order_acquire) != task) continue;
        for (int attempt = 0; attempt < 16; attempt++) {
            uint32_t before = atomic_load_explicit(&slot->sequence, memory_order_acquire);
            if (before & 1) continue;
            uint64_t words[LABEL_WORDS];
            for (int index = 0; index < LABEL_WORDS; index++) {
                words[index] = atomic_load_explicit(&slot->words[index], memory_order_relaxed);
            }
            uint32_t length = atomic_load_explicit(&slot->length, memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&slot->sequence, memory_order_relaxed) != before) continue;
            if (atomic_load_explicit(&slot->task, memory_order_relaxed) != task) return -1;
            if (length == 0) return -1;  // being set or cleared: no label
            if (length >= capacity) length = (uint32_t)capacity - 1;
            memcpy(out, words, length);
            out[length] = 0;
            return (ssize_t)length;
        }
        return -1;
    }
    return -1;
}

uint64_t cstallmon_labels_dropped(void) {
    return atomic_load_explicit(&g_labels_dropped, memory_order_relaxed);
}
