// A stalled task's own task-local value, read by the watchdog: how a label set once per request reaches every task
// of that request (a task inherits its parent's task-locals: a structured child links to its parent's, an
// unstructured task gets a copy).
//
// The runtime keeps a task's task-local bindings as a singly linked list of items (swift/ABI/TaskLocal.h): each item
// is {next (its low bits: the link's kind), key (the TaskLocal object), value type (NULL: a link to a parent's
// items), the value inline after these three words, aligned to its type}; the task holds the head of the list. Where
// the task holds it is not a public interface, so it is found, not assumed: `cstallmon_task_locals_find_head`
// searches a real task that has one binding of a known key and value for the word that leads to it, and the check
// then confirms the same place with a nested binding, a child task, a task group's child and an unstructured task
// before any read
// (`cstallmon_task_locals_confirm`). Every read goes through process_vm_readv, which fails instead of faulting on a
// stale pointer.
#include "CStallmonConcurrency.h"
#include "worker_jobs.h"

#include <stdatomic.h>

#define ITEM_NEXT 0
#define ITEM_KEY 1
#define ITEM_VALUE_TYPE 2
#define ITEM_VALUE 3               // a UInt64-sized value: right after the three words (sizeof(Item) is 24)
// The link's kind: 2 bits in TaskLocal.h; a child task's link to its parent's items carries bit 2 on Swift 6.3 (seen
// by the check's child task). Items are allocated 16-byte aligned, so masking 3 bits loses nothing.
#define ITEM_LINK_BITS ((uintptr_t)7)
#define JOB_ID CSTALLMON_TASK_JOB_ID_OFFSET  // after the heap header, the scheduler's two words and the flags
#define HEAD_SEARCH_BYTES 512      // of the task: the head lies in its private storage, well within this
#define MAX_ITEMS_WALKED 64        // bindings of all keys, the parents' included

static _Atomic intptr_t g_head_offset = -1;
static _Atomic uintptr_t g_key;
static _Atomic uintptr_t g_value_type;  // the value's type metadata, as the check's binding had it
// 0: not checked yet; 1: found and confirmed; -1: not (values are never read).
static _Atomic int g_task_local_layout;

// The innermost binding of `key` in the list starting at `item`: 1 and its value, 0 when none, -1 when unreadable.
// Only an item of the binding's own value type counts: a task group's child began with an item under the same key
// whose type word is not that type (seen on Swift 6.3 by the check's group child), and the binding it inherits
// follows. Async-signal-safe (process_vm_readv only).
static int find_value(uintptr_t item, uintptr_t key, uintptr_t value_type, uint64_t *value) {
    for (int hop = 0; hop < MAX_ITEMS_WALKED && item != 0; hop++) {
        uintptr_t words[4];
        if (!read_own(item, words, sizeof words)) return -1;
        if (words[ITEM_KEY] == key && words[ITEM_VALUE_TYPE] == value_type) {
            *value = words[ITEM_VALUE];
            return 1;
        }
        item = words[ITEM_NEXT] & ~ITEM_LINK_BITS;
    }
    return item == 0 ? 0 : -1;
}

// Async-signal-safe, as find_value.
static int read_task_local(uintptr_t task, uint64_t *value) {
    intptr_t head_offset = atomic_load_explicit(&g_head_offset, memory_order_relaxed);
    uintptr_t head = 0;
    if (head_offset < 0 || !read_own(task + (uintptr_t)head_offset, &head, sizeof head)) return -1;
    return find_value(head & ~ITEM_LINK_BITS, atomic_load_explicit(&g_key, memory_order_relaxed),
                      atomic_load_explicit(&g_value_type, memory_order_relaxed), value);
}

int cstallmon_task_locals_find_head(uintptr_t task, uintptr_t key, uint64_t expected) {
    uintptr_t words[HEAD_SEARCH_BYTES / sizeof(uintptr_t)];
    if (task == 0 || key == 0 || !read_own(task, words, sizeof words)) return -1;
    for (size_t index = 0; index < sizeof words / sizeof words[0]; index++) {
        // The head is a plain pointer to an item (no link bits).
        uintptr_t item = words[index];
        if (item == 0 || (item & 7) != 0) continue;
        uintptr_t fields[4];
        // The task has this one binding: the head is an item of `key`, holding `expected`.
        if (!read_own(item, fields, sizeof fields)) continue;
        if (fields[ITEM_KEY] != key || fields[ITEM_VALUE_TYPE] == 0 || fields[ITEM_VALUE] != expected) continue;
        atomic_store_explicit(&g_head_offset, (intptr_t)(index * sizeof(uintptr_t)), memory_order_relaxed);
        atomic_store_explicit(&g_key, key, memory_order_relaxed);
        atomic_store_explicit(&g_value_type, fields[ITEM_VALUE_TYPE], memory_order_relaxed);
        return (int)(index * sizeof(uintptr_t));
    }
    return -1;
}

bool cstallmon_task_has_job_id(uintptr_t task, uint32_t job_id) {
    uint32_t id = 0;
    return read_own(task + JOB_ID, &id, sizeof id) && id == job_id;
}

// Whether `task`'s memory still is the task of that id: a task is freed in its own last job, before the probe
// records the job's end, and its address may be reused at once. Async-signal-safe (process_vm_readv only).
static bool task_has_id(uintptr_t task, uint64_t task_id) {
    return cstallmon_task_has_job_id(task, (uint32_t)task_id);
}

int cstallmon_task_locals_confirm(uintptr_t task, uint64_t expected) {
    // The id check of `cstallmon_worker_label` is confirmed with every task of the check.
    if (!task_has_id(task, cstallmon_job_task_id(task))) return -1;
    uint64_t value = 0;
    int found = read_task_local(task, &value);
    if (expected == 0) return found == 0 ? 1 : -1;
    return found == 1 && value == expected ? 1 : -1;
}

void cstallmon_task_locals_set_verdict(int passed) {
    atomic_store_explicit(&g_task_local_layout, passed ? 1 : -1, memory_order_release);
}

int cstallmon_task_locals_layout(void) {
    return atomic_load_explicit(&g_task_local_layout, memory_order_acquire);
}

int cstallmon_task_local_value(uintptr_t task, uint64_t *value) {
    if (atomic_load_explicit(&g_task_local_layout, memory_order_acquire) != 1) return -1;
    return read_task_local(task, value);
}

int cstallmon_worker_drained_task_label(int index, uint64_t sequence, uintptr_t task, uint32_t job_id,
                                        cstallmon_label_entry *label) {
    uintptr_t job;
    uint32_t attributes;
    if (!cstallmon_worker_job(index, sequence, &job, &attributes) || (attributes & 0xFF) == 0) return -1;
    if (task == 0 || (task & 15) != 0) return -1;
    uint64_t value = 0;
    if (cstallmon_task_local_value(task, &value) != 1 || !cstallmon_label_lookup(value, label)) return -1;
    // After the reads, the drain still runs that task, and its memory still holds the task of that id: what was read
    // was the running task's.
    return cstallmon_worker_drain_still_runs_task(index, sequence, task, job_id) ? 1 : -1;
}

int cstallmon_worker_label(int index, uint64_t sequence, uint64_t task_id, cstallmon_label_entry *out) {
    uintptr_t task;
    uint32_t attributes;
    if (!cstallmon_worker_job(index, sequence, &task, &attributes)) return -1;
    if ((attributes & 0xFF) != 0) {
        // An actor's drain job has no task of its own: the label is that of the task it runs now, whose id is read
        // first, so that a task taking that address later is told apart.
        uint32_t id = 0;
        if (!cstallmon_worker_current_task(index, &task) || !read_own(task + JOB_ID, &id, sizeof id)) return -1;
        return cstallmon_worker_drained_task_label(index, sequence, task, id, out);
    }
    uint64_t value = 0;
    if (cstallmon_task_local_value(task, &value) != 1 || !cstallmon_label_lookup(value, out)) return -1;
    // After the reads, the address still holds the task the probe names (not a new task of another request that
    // took a freed task's place), and the job still runs: the value read was that task's.
    if (!task_has_id(task, task_id)) return -1;
    return cstallmon_worker_still_runs(index, sequence) ? 1 : -1;
}
