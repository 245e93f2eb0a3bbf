// Which task a worker runs right now, when its job is not a task itself: an actor's drain job runs the jobs of the
// tasks queued on the actor one after another, and only the runtime's thread-local "active task" (`ActiveTask` in
// Swift's Actor.cpp, a `thread_local` on Linux, set while a task's job runs and cleared before the task suspends or
// completes) knows which one runs now.
//
// Where that variable lies is not a public interface, so it is found, not assumed. The runtime's image has one
// block of thread-local variables (its PT_TLS segment); loaded with the process (or linked into the executable),
// every thread holds that block at the same distance from its pthread_self(). (Loaded later with dlopen, each thread
// gets it apart, and the confirmation fails.) At start, a plain thread locates the block
// (`cstallmon_current_task_locate_block`: dl_iterate_phdr takes the loader's lock, never on a pool worker), a task
// then searches its own thread's block for the word equal to itself (`cstallmon_current_task_find`); the candidates are then confirmed on other threads: 0 on a thread that
// runs no task, and the running task inside an actor's drain job (`cstallmon_current_task_confirm`). The watchdog
// reads a worker's word with process_vm_readv, which fails instead of faulting.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE
#endif

#include "CStallmonConcurrency.h"
#include "worker_jobs.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>

#define SWIFTCC __attribute__((swiftcall))
typedef struct swift_job swift_job;
extern SWIFTCC void swift_job_run(swift_job *job, void *executor_identity, uintptr_t executor_implementation);

// Words of the runtime's block equal to the checking task: more than one would be unusual, a few are kept so that a
// stray copy cannot hide the variable.
#define MAX_CANDIDATES 4

// The check's state, written by one checking task at a time (the monitor's start).
static struct {
    intptr_t block_offset;  // the runtime's block, from pthread_self() (the same on every thread)
    size_t block_size;
    intptr_t offsets[MAX_CANDIDATES];  // from pthread_self()
    int count;
} g_check;

static _Atomic intptr_t g_offset;
// 0: not checked yet; 1: found and confirmed; -1: not (never read).
static _Atomic int g_layout;

typedef struct {
    uintptr_t code;  // an address in the runtime's code
    uintptr_t block;
    size_t size;
} tls_search;

// dl_iterate_phdr's callback: the calling thread's block of the image whose loaded segments hold `code`. NOT
// async-signal-safe (it runs under the loader's lock).
static int find_block(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    tls_search *search = data;
    bool holds_code = false;
    const ElfW(Phdr) *tls = NULL;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[index];
        const uintptr_t start = info->dlpi_addr + header->p_vaddr;
        if (header->p_type == PT_LOAD && search->code >= start && search->code < start + header->p_memsz) {
            holds_code = true;
        }
        if (header->p_type == PT_TLS) tls = header;
    }
    if (!holds_code) return 0;
    if (tls != NULL && info->dlpi_tls_data != NULL) {
        search->block = (uintptr_t)info->dlpi_tls_data;
        search->size = tls->p_memsz;
    }
    return 1;
}

int cstallmon_current_task_locate_block(void) {
    g_check.block_size = 0;
    // The runtime's image: the one whose code holds swift_job_run. (In a non-PIE executable the address may be a stub
    // of the executable's; its block, if any, then holds no task, and the check fails.)
    tls_search search = {.code = (uintptr_t)&swift_job_run};
    dl_iterate_phdr(find_block, &search);
    if (search.block == 0 || search.size == 0) return -1;
    g_check.block_offset = (intptr_t)(search.block - (uintptr_t)pthread_self());
    g_check.block_size = search.size;
    return 1;
}

int cstallmon_current_task_find(uintptr_t current_task) {
    g_check.count = 0;
    if (current_task == 0 || g_check.block_size == 0) return -1;
    const uintptr_t self = (uintptr_t)pthread_self();
    const uintptr_t block = self + (uintptr_t)g_check.block_offset;
    const uintptr_t first = (block + 7) & ~(uintptr_t)7;
    // The calling thread's block, found at the distance the locating thread's was: read with process_vm_readv, in
    // case it is not there (a runtime loaded with dlopen keeps it apart on each thread).
    uintptr_t words[64];
    for (uintptr_t at = first; at + sizeof(uintptr_t) <= block + g_check.block_size; at += sizeof words) {
        size_t count = (block + g_check.block_size - at) / sizeof(uintptr_t);
        if (count > sizeof words / sizeof words[0]) count = sizeof words / sizeof words[0];
        if (!read_own(at, words, count * sizeof(uintptr_t))) return -1;
        for (size_t index = 0; index < count; index++) {
            if (words[index] != current_task) continue;
            if (g_check.count == MAX_CANDIDATES) return g_check.count;
            g_check.offsets[g_check.count++] = (intptr_t)(at + index * sizeof(uintptr_t) - self);
        }
    }
    return g_check.count;
}

// Async-signal-safe (process_vm_readv). The word at `offset` from `thread` (a pthread_self()).
static bool read_word(uintptr_t thread, intptr_t offset, uintptr_t *value) {
    return read_own(thread + (uintptr_t)offset, value, sizeof *value);
}

int cstallmon_current_task_confirm(uintptr_t expected) {
    const uintptr_t self = (uintptr_t)pthread_self();
    int kept = 0;
    for (int index = 0; index < g_check.count; index++) {
        uintptr_t value = 1;  // not 0: an unreadable word confirms nothing
        if (read_word(self, g_check.offsets[index], &value) && value == expected) {
            g_check.offsets[kept++] = g_check.offsets[index];
        }
    }
    g_check.count = kept;
    return kept;
}

void cstallmon_current_task_set_verdict(int passed) {
    const bool found = passed && g_check.count > 0;
    if (found) atomic_store_explicit(&g_offset, g_check.offsets[0], memory_order_relaxed);
    atomic_store_explicit(&g_layout, found ? 1 : -1, memory_order_release);
}

int cstallmon_current_task_layout(void) {
    return atomic_load_explicit(&g_layout, memory_order_acquire);
}

uintptr_t cstallmon_thread_active_task_address(uintptr_t thread) {
    if (atomic_load_explicit(&g_layout, memory_order_acquire) != 1 || thread == 0) return 0;
    return thread + (uintptr_t)atomic_load_explicit(&g_offset, memory_order_relaxed);
}

uintptr_t cstallmon_worker_active_task_address(int index) {
    uintptr_t thread;
    return cstallmon_worker_thread(index, &thread) ? cstallmon_thread_active_task_address(thread) : 0;
}

uintptr_t cstallmon_thread_active_task(uintptr_t thread) {
    const uintptr_t address = cstallmon_thread_active_task_address(thread);
    uintptr_t task = 0;
    if (address == 0 || !read_own(address, &task, sizeof task) || (task & 15) != 0) return 0;
    return task;
}

bool cstallmon_worker_current_task(int index, uintptr_t *task) {
    uintptr_t thread;
    *task = cstallmon_worker_thread(index, &thread) ? cstallmon_thread_active_task(thread) : 0;
    return *task != 0;
}

bool cstallmon_thread_still_runs_task(uintptr_t thread, uintptr_t task, uint32_t job_id) {
    return task != 0 && cstallmon_thread_active_task(thread) == task && cstallmon_task_has_job_id(task, job_id);
}

bool cstallmon_worker_drain_still_runs_task(int index, uint64_t sequence, uintptr_t task, uint32_t job_id) {
    uintptr_t thread;
    return cstallmon_worker_still_runs(index, sequence) && cstallmon_worker_thread(index, &thread)
        && cstallmon_thread_still_runs_task(thread, task, job_id);
}
