// The table of loaded images the signal handler unwinds with, so that it never calls the dynamic loader.
//
// libunwind's local unwinder finds the unwind tables of an address by calling dl_iterate_phdr, which takes the
// loader's list lock; inside a signal handler that can deadlock (the interrupted thread may hold a lock that a
// dlopen/dlclose holding the list lock waits for: dlclose frees memory while it holds it). Here, outside any
// handler, the watchdog copies what dl_iterate_phdr reports (each image's load address, name and program headers)
// into an immutable table and publishes it with one atomic pointer store. libunwind's own reference to
// dl_iterate_phdr (its GOT slot, in libunwind.so only) is pointed at cstallmon_table_dl_iterate_phdr, which serves
// that table to a thread inside our handler, and any other caller the real dl_iterate_phdr when the loader's list
// lock is free (the table when it is not: iterate_outside_handler). libunwind then reads each image's .eh_frame_hdr
// search table and .eh_frame exactly as before, so the frames are the same.
//
// Each capture asks the refresher thread to rebuild the table when the loader's counters of added and removed
// objects (dlpi_adds, dlpi_subs) changed, and first checks the table against the program headers the loader has now
// (cstallmon_table_check_loaded_images): an image unloaded or replaced since is flagged stale (the one field of a
// table that changes after it is published) and hidden from the handler. A replaced table is freed only once no
// reader can be inside it (a count of the readers: handlers, and the checks and table walks outside them, read after
// the swap).
//
// This file builds, publishes and serves the table; image_check.c checks it against the loaded objects,
// image_refresher.c rebuilds it off the watchdog, unwinder_patch.c points libunwind at it.
#include "capture_state.h"
#include "image_table.h"

#include <CStallmonLoopShims.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

_Atomic(image_table *) cstallmon_table_current;
_Atomic int32_t cstallmon_table_readers;
// The calling thread is inside our handler: dl_iterate_phdr from libunwind serves the table.
static __thread int tls_in_handler __attribute__((tls_model("initial-exec")));
pthread_mutex_t cstallmon_table_mutex = PTHREAD_MUTEX_INITIALIZER;
static image_table *g_retired;

// MARK: - Building (NOT async-signal-safe: runs on the watchdog, under the loader lock for the copy)

typedef struct {
    size_t images, phdrs, name_bytes, ranges;
} table_sizes;

typedef struct {
    image_table *table;
    table_sizes capacity;
    size_t phdrs_used, names_used;
    ElfW(Phdr) *phdr_storage;
    char *name_storage;
    int overflow;
} table_fill;

// Async-signal-safe (arithmetic). Whether a dl_phdr_info of `size` bytes has dlpi_adds and dlpi_subs.
static int has_counters(size_t size) {
    return size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(unsigned long long);
}

// Async-signal-safe (arithmetic). An executable PT_LOAD segment: code a stack may be in.
static int is_code_segment(const ElfW(Phdr) *header) {
    return header->p_type == PT_LOAD && (header->p_flags & PF_X);
}

// Async-signal-safe (reads of the program headers). The image's code segments.
static size_t code_segments(const struct dl_phdr_info *info) {
    size_t count = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) count += is_code_segment(&info->dlpi_phdr[i]);
    return count;
}

static int measure_image(struct dl_phdr_info *info, size_t size, void *context) {
    (void)size;
    table_sizes *sizes = context;
    sizes->images++;
    sizes->phdrs += info->dlpi_phnum;
    sizes->name_bytes += (info->dlpi_name ? strlen(info->dlpi_name) : 0) + 1;
    sizes->ranges += code_segments(info);
    return 0;
}

static int copy_image(struct dl_phdr_info *info, size_t size, void *context) {
    table_fill *fill = context;
    image_table *table = fill->table;
    const size_t name_length = (info->dlpi_name ? strlen(info->dlpi_name) : 0) + 1;
    const size_t ranges = code_segments(info);
    // The list grew between measuring and copying: start again.
    if (table->image_count == fill->capacity.images || fill->phdrs_used + info->dlpi_phnum > fill->capacity.phdrs ||
        fill->names_used + name_length > fill->capacity.name_bytes ||
        table->range_count + ranges > fill->capacity.ranges) {
        fill->overflow = 1;
        return 1;
    }
    table_image *image = &table->images[table->image_count++];
    image->address = info->dlpi_addr;
    image->phnum = info->dlpi_phnum;
    ElfW(Phdr) *phdr = fill->phdr_storage + fill->phdrs_used;
    memcpy(phdr, info->dlpi_phdr, info->dlpi_phnum * sizeof(ElfW(Phdr)));
    image->phdr = phdr;
    image->live_phdr = (uintptr_t)info->dlpi_phdr;
    fill->phdrs_used += info->dlpi_phnum;
    char *name = fill->name_storage + fill->names_used;
    memcpy(name, info->dlpi_name ? info->dlpi_name : "", name_length);
    image->name = name;
    fill->names_used += name_length;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (!is_code_segment(header)) continue;
        table->ranges[table->range_count++] =
            (table_range){info->dlpi_addr + header->p_vaddr, info->dlpi_addr + header->p_vaddr + header->p_memsz,
                          table->image_count - 1};
    }
    if (has_counters(size)) {
        table->adds = info->dlpi_adds;
        table->subs = info->dlpi_subs;
    }
    return 0;
}

static int compare_ranges(const void *left, const void *right) {
    const table_range *a = left, *b = right;
    return a->low < b->low ? -1 : a->low > b->low;
}

// NOT async-signal-safe (malloc, dl_iterate_phdr). One allocation holding the table and its copies; NULL when out
// of memory.
// An image whose program headers cannot be read through process_vm_readv even now (never seen; /proc hardening
// could) is left out of the check rather than making every capture find the table stale.
static void forget_unreadable_headers(image_table *table) {
    for (size_t index = 0; index < table->image_count; index++) {
        table_image *image = &table->images[index];
        const size_t length = (size_t)image->phnum * sizeof(ElfW(Phdr));
        unsigned char probe[sizeof(ElfW(Phdr))];
        struct iovec local = {.iov_base = probe, .iov_len = sizeof probe};
        struct iovec remote = {.iov_base = (void *)image->live_phdr, .iov_len = sizeof probe};
        if (length == 0 || cstallmon_vm_readv(&local, 1, &remote, 1) != (long)sizeof probe) {
            image->live_phdr = 0;
        }
    }
}

static image_table *build_table(void) {
    for (int attempt = 0; attempt < 8; attempt++) {
        table_sizes sizes = {0};
        dl_iterate_phdr(measure_image, &sizes);
        // Room for a few objects loaded between the two passes.
        sizes.images += 4;
        sizes.phdrs += 64;
        sizes.name_bytes += 4 * 256;
        sizes.ranges += 16;
        const size_t bytes = sizeof(image_table) + sizes.images * sizeof(table_image) +
                             sizes.ranges * sizeof(table_range) + sizes.phdrs * sizeof(ElfW(Phdr)) +
                             sizes.name_bytes;
        unsigned char *block = calloc(1, bytes);
        if (!block) return NULL;
        image_table *table = (image_table *)block;
        unsigned char *cursor = block + sizeof(image_table);
        table->images = (table_image *)cursor;
        cursor += sizes.images * sizeof(table_image);
        table->ranges = (table_range *)cursor;
        cursor += sizes.ranges * sizeof(table_range);
        table_fill fill = {.table = table, .capacity = sizes, .phdr_storage = (ElfW(Phdr) *)cursor};
        cursor += sizes.phdrs * sizeof(ElfW(Phdr));
        fill.name_storage = (char *)cursor;
        dl_iterate_phdr(copy_image, &fill);
        if (fill.overflow) {
            free(block);
            continue;
        }
        qsort(table->ranges, table->range_count, sizeof(table_range), compare_ranges);
        forget_unreadable_headers(table);
        return table;
    }
    return NULL;
}

static int read_counters(struct dl_phdr_info *info, size_t size, void *context) {
    (void)info;
    unsigned long long *counters = context;
    if (has_counters(size)) {
        counters[0] = info->dlpi_adds;
        counters[1] = info->dlpi_subs;
    }
    return 1;  // the counters are the same in every entry: one is enough
}

// NOT async-signal-safe. Frees retired tables when no handler is inside any table. Call with cstallmon_table_mutex held.
void cstallmon_table_free_retired_if_quiet(void) {
    if (!g_retired) return;
    // A handler that loaded a retired table counted itself in first; one that counts itself in now loads the
    // current table. Wait briefly for the readers to leave (a handler takes microseconds), then try next time.
    for (int spin = 0; spin < 100 && atomic_load(&cstallmon_table_readers) != 0; spin++) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&cstallmon_table_readers) != 0) return;
    while (g_retired) {
        image_table *next = g_retired->next_retired;
        free(g_retired);
        g_retired = next;
    }
}

int cstallmon_table_refresh(void) {
    unsigned long long counters[2] = {0, 0};
    dl_iterate_phdr(read_counters, counters);
    image_table *current = atomic_load(&cstallmon_table_current);
    if (current && current->adds == counters[0] && current->subs == counters[1]) return 0;
    pthread_mutex_lock(&cstallmon_table_mutex);
    current = atomic_load(&cstallmon_table_current);
    int result = 0;
    if (!current || current->adds != counters[0] || current->subs != counters[1]) {
        image_table *fresh = build_table();
        if (fresh) {
            image_table *old = atomic_exchange(&cstallmon_table_current, fresh);
            if (old) {
                old->next_retired = g_retired;
                g_retired = old;
            }
            result = 1;
        } else {
            result = -1;
        }
    }
    cstallmon_table_free_retired_if_quiet();
    pthread_mutex_unlock(&cstallmon_table_mutex);
    return result;
}

// MARK: - Reading (async-signal-safe: atomics and reads of the immutable table)

void cstallmon_table_enter(void) {
    atomic_fetch_add(&cstallmon_table_readers, 1);
    tls_in_handler = 1;
}

void cstallmon_table_exit(void) {
    tls_in_handler = 0;
    atomic_fetch_sub(&cstallmon_table_readers, 1);
}

int cstallmon_table_range_of(uintptr_t address, uintptr_t *low_out, uintptr_t *high_out) {
    const image_table *table = atomic_load(&cstallmon_table_current);
    if (!table) return 0;
    size_t low = 0, high = table->range_count;
    while (low < high) {  // the last range starting at or below `address`
        const size_t middle = low + (high - low) / 2;
        if (table->ranges[middle].low <= address) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    if (low == 0 || address >= table->ranges[low - 1].high) return 0;
    if (atomic_load_explicit(&table->images[table->ranges[low - 1].image].stale, memory_order_relaxed)) return 0;
    *low_out = table->ranges[low - 1].low;
    *high_out = table->ranges[low - 1].high;
    return 1;
}

// Async-signal-safe (reads of the immutable table, and libunwind's callback). Serves `callback` the table's images
// as dl_iterate_phdr would, skipping those found stale.
static int walk_table(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data) {
    const image_table *table = atomic_load(&cstallmon_table_current);
    if (!table) return 0;  // nothing known: libunwind falls back to its frame-chain heuristic
    for (size_t index = 0; index < table->image_count; index++) {
        const table_image *image = &table->images[index];
        if (atomic_load_explicit(&image->stale, memory_order_relaxed)) continue;  // unloaded or replaced since
        struct dl_phdr_info info;
        memset(&info, 0, sizeof info);
        info.dlpi_addr = image->address;
        info.dlpi_name = image->name;
        info.dlpi_phdr = image->phdr;
        info.dlpi_phnum = image->phnum;
        info.dlpi_adds = table->adds;
        info.dlpi_subs = table->subs;
        const int result = callback(&info, sizeof info, data);
        if (result != 0) return result;
    }
    return 0;
}

// NOT async-signal-safe (outside our handler only). libunwind calls dl_iterate_phdr with its register-state cache
// mutex held, the mutex our handler takes too. A thread of the application unwinding with libunwind itself (Swift
// Testing does, for every thrown error) that waited here for the loader's list lock, held by a thread that waits for
// a lock the sampled thread holds, would keep that handler waiting for ever (seen as a hang of the test suite). So the
// list lock is only tried, never waited for: free, the loader answers (dl_iterate_phdr takes the recursive lock
// again); taken, the table answers, as it does in the handler, after its images are checked against the loaded ones
// (one that changed is skipped, and the refresher woken; an object loaded since the last refresh is unknown to that
// one lookup). Each cache-mutex hold thus lasts a lookup, never a wait for the loader. Without the lock's address
// the cache is off (install.c) and this is exactly dl_iterate_phdr.
static int iterate_outside_handler(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data) {
    pthread_mutex_t *lock = (pthread_mutex_t *)(uintptr_t)g_state.load_write_lock;
    if (!lock) return dl_iterate_phdr(callback, data);
    if (pthread_mutex_trylock(lock) == 0) {
        const int result = dl_iterate_phdr(callback, data);
        pthread_mutex_unlock(lock);
        return result;
    }
    const int changed = !cstallmon_table_compare_loaded_images();
    if (changed) atomic_store(&cstallmon_table_flush_owed, 1);
    cstallmon_table_request_refresh(changed);
    atomic_fetch_add(&cstallmon_table_readers, 1);  // the table is not freed while it is walked
    const int result = walk_table(callback, data);
    atomic_fetch_sub(&cstallmon_table_readers, 1);
    return result;
}

// libunwind.so's GOT slot for dl_iterate_phdr points here once cstallmon_table_patch_unwinder ran. Inside our handler
// (async-signal-safe): the table. Outside it: the loader, never waited for long (iterate_outside_handler).
// (The bench's and the fault suite's through-the-loader mode, the design before the table, is exactly dl_iterate_phdr
// for everyone: its handler does not count itself in.)
int cstallmon_table_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data) {
    if (atomic_load_explicit(&g_state.through_loader, memory_order_relaxed)) return dl_iterate_phdr(callback, data);
    if (!tls_in_handler) return iterate_outside_handler(callback, data);
    return walk_table(callback, data);
}
