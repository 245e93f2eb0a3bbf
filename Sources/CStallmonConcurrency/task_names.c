// Task introspection: the name of a task created with `Task(name:)`, read by the watchdog at a stall's begin. What
// the executor records of a job (its probe, `cstallmon_worker_job`) says which task runs; this reads the task.

#include "CStallmonConcurrency.h"
#include "worker_jobs.h"

#include <stdatomic.h>
#include <string.h>

// Where the runtime keeps the name of a task created with `Task(name:)` (Swift 6.2+: `AsyncTask::pushInitialTaskName`
// copies it into the task's allocator and links a TaskNameStatusRecord into the task's status records). Offsets of
// Swift 6.3 on 64-bit Linux, found by looking at real tasks; nothing in them is a promise of the runtime, so they are
// used only after `cstallmon_concurrency_check_task_names` saw them give the name `Task.name` gives, and every read
// goes through process_vm_readv, which fails instead of faulting if a pointer is stale.
#define TASK_INNERMOST_STATUS_RECORD 0x68  // ActiveTaskStatus.Record, in the task's private storage
#define STATUS_RECORD_PARENT 0x08          // TaskStatusRecord: Flags (kind in the low byte), Parent
#define TASK_NAME_RECORD_NAME 0x10         // TaskNameStatusRecord: the name, a C string
#define STATUS_RECORD_KIND_TASK_NAME 6
#define MAX_STATUS_RECORDS_WALKED 32

// 0: not checked yet; 1: the layout gave the right name; -1: it did not (names are never read).
static _Atomic int g_task_name_layout;

// Copies the C string at `address` (at most capacity - 1 bytes) page by page, so a string ending just before an
// unmapped page is still read. Returns its length, or -1 if unreadable or longer than the buffer.
static ssize_t read_own_string(uintptr_t address, char *out, size_t capacity) {
    const size_t page = 4096;
    size_t copied = 0;
    while (copied + 1 < capacity) {
        uintptr_t at = address + copied;
        size_t chunk = page - (at % page);
        if (chunk > capacity - 1 - copied) chunk = capacity - 1 - copied;
        if (!read_own(at, out + copied, chunk)) return -1;
        void *end = memchr(out + copied, 0, chunk);
        if (end != NULL) return (char *)end - out;
        copied += chunk;
    }
    return -1;
}

static ssize_t read_task_name(uintptr_t task, char *out, size_t capacity) {
    uintptr_t record = 0;
    if (!read_own(task + TASK_INNERMOST_STATUS_RECORD, &record, sizeof record)) return -1;
    for (int hop = 0; hop < MAX_STATUS_RECORDS_WALKED && record != 0; hop++) {
        uintptr_t fields[3];
        if (!read_own(record, fields, sizeof fields)) return -1;
        if ((fields[0] & 0xFF) == STATUS_RECORD_KIND_TASK_NAME) {
            // The name's record is the task's first, so the outermost: anything else is not a name record (a record
            // popped and reused while this walked).
            if (fields[STATUS_RECORD_PARENT / sizeof(uintptr_t)] != 0) return -1;
            return read_own_string(fields[TASK_NAME_RECORD_NAME / sizeof(uintptr_t)], out, capacity);
        }
        record = fields[STATUS_RECORD_PARENT / sizeof(uintptr_t)];
    }
    return -1;
}

int cstallmon_concurrency_check_task_names(uintptr_t current_task, const char *expected) {
    char name[256];
    ssize_t length = read_task_name(current_task, name, sizeof name);
    int verdict = length >= 0 && strcmp(name, expected) == 0 ? 1 : -1;
    atomic_store_explicit(&g_task_name_layout, verdict, memory_order_release);
    return verdict;
}

ssize_t cstallmon_worker_task_name(int index, uint64_t sequence, char *out, size_t capacity) {
    if (capacity == 0) return -1;
    if (atomic_load_explicit(&g_task_name_layout, memory_order_acquire) != 1) return -1;
    uintptr_t task;
    uint32_t attributes;
    if (!cstallmon_worker_job(index, sequence, &task, &attributes) || (attributes & JOB_NAMED_TASK) == 0) return -1;
    ssize_t length = read_task_name(task, out, capacity);
    // Still the same job after the reads: the task was alive throughout, so what was read is its name.
    return cstallmon_worker_still_runs(index, sequence) ? length : -1;
}

