// The table of loaded images the signal handler unwinds with, so that it never calls the dynamic loader.
//
// libunwind's local unwinder finds the unwind tables of an address by calling dl_iterate_phdr, which takes the
// loader's list lock; inside a signal handler that can deadlock (the interrupted thread may hold a lock that a
// dlopen/dlclose holding the list lock waits for: dlclose frees memory while it holds it). Here, outside any
// handler, the watchdog copies what dl_iterate_phdr reports (each image's load address, name and program headers)
// into an immutable table and publishes it with one atomic pointer store. libunwind's own reference to
// dl_iterate_phdr (its GOT slot, in libunwind.so only) is pointed at table_dl_iterate_phdr, which serves that table
// to a thread inside our handler, and any other caller the real dl_iterate_phdr when the loader's list lock is free
// (the table when it is not: iterate_outside_handler). libunwind then reads each image's .eh_frame_hdr search table
// and .eh_frame exactly as before, so the frames are the same.
//
// Each capture asks the refresher thread to rebuild the table when the loader's counters of added and removed
// objects (dlpi_adds, dlpi_subs) changed, and first checks the table against the program headers the loader has now
// (cstallmon_table_check_loaded_images): an image unloaded or replaced since is flagged stale (the one field of a
// table that changes after it is published) and hidden from the handler. A replaced table is freed only once no
// reader can be inside it (a count of the readers: handlers, and the checks and table walks outside them, read after
// the swap).
#include "capture_state.h"

#include <dlfcn.h>
#include <pthread.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct {
    uintptr_t address;     // dlpi_addr
    const char *name;      // a copy
    const ElfW(Phdr) *phdr;  // a copy
    ElfW(Half) phnum;
    // Where the loader keeps the image's program headers (in its first mapped segment), read again before each
    // capture to tell whether the image is still the one the copy describes; 0 when they could not be read at all.
    uintptr_t live_phdr;
    // Set (never cleared) by the watchdog's check when the loader no longer has these program headers there: the
    // image was unloaded or replaced, and the handler must not unwind with the copy.
    _Atomic int stale;
} table_image;

typedef struct {
    uintptr_t low, high;   // an executable PT_LOAD segment
    size_t image;          // its image's index
} table_range;

typedef struct image_table image_table;

struct image_table {
    unsigned long long adds, subs;
    size_t image_count, range_count;
    table_image *images;
    table_range *ranges;   // sorted by low
    struct image_table *next_retired;
};

static _Atomic(image_table *) g_table;
// Readers inside a table (handlers between cstallmon_table_enter and cstallmon_table_exit, the checks, and table
// walks outside handlers): a replaced table is freed only when this is 0.
static _Atomic int32_t g_table_readers;
// The calling thread is inside our handler: dl_iterate_phdr from libunwind serves the table.
static __thread int tls_in_handler __attribute__((tls_model("initial-exec")));
// Serializes refreshes (watchdogs of several monitors) and guards the retired list.
static pthread_mutex_t g_table_mutex = PTHREAD_MUTEX_INITIALIZER;
static image_table *g_retired;
static _Atomic int g_table_patched;

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
        if (length == 0 || process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof probe) {
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

// NOT async-signal-safe. Frees retired tables when no handler is inside any table. Call with g_table_mutex held.
static void free_retired_if_quiet(void) {
    if (!g_retired) return;
    // A handler that loaded a retired table counted itself in first; one that counts itself in now loads the
    // current table. Wait briefly for the readers to leave (a handler takes microseconds), then try next time.
    for (int spin = 0; spin < 100 && atomic_load(&g_table_readers) != 0; spin++) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&g_table_readers) != 0) return;
    while (g_retired) {
        image_table *next = g_retired->next_retired;
        free(g_retired);
        g_retired = next;
    }
}

int cstallmon_table_refresh(void) {
    unsigned long long counters[2] = {0, 0};
    dl_iterate_phdr(read_counters, counters);
    image_table *current = atomic_load(&g_table);
    if (current && current->adds == counters[0] && current->subs == counters[1]) return 0;
    pthread_mutex_lock(&g_table_mutex);
    current = atomic_load(&g_table);
    int result = 0;
    if (!current || current->adds != counters[0] || current->subs != counters[1]) {
        image_table *fresh = build_table();
        if (fresh) {
            image_table *old = atomic_exchange(&g_table, fresh);
            if (old) {
                old->next_retired = g_retired;
                g_retired = old;
            }
            result = 1;
        } else {
            result = -1;
        }
    }
    free_retired_if_quiet();
    pthread_mutex_unlock(&g_table_mutex);
    return result;
}

// MARK: - Checking the table against the loaded objects (the watchdog, before each capture)

// An object unloaded and another loaded at the same address leave the table describing the first one's segments
// and unwind tables until the refresher catches up; unwinding the second with them would read its memory at the
// first one's offsets (garbage frames, or a fault inside the handler). The loader's counters (dlpi_adds,
// dlpi_subs) cannot be read without its list lock, which the watchdog must never wait for; so instead each image's
// program headers, which libunwind's lookups rest on, are read again where the loader keeps them and compared with
// the table's copy. process_vm_readv fails instead of faulting on an address no longer mapped.
#define CHECK_BATCH 32
#define CHECK_BUFFER_BYTES 16384

// A stale image found outside a capture (iterate_outside_handler): the next capture's check reports it, so that
// libunwind's caches are flushed there, as for a change the capture found itself.
static _Atomic int g_flush_owed;

// NOT async-signal-safe (process_vm_readv is, but this is only ever called outside handlers). Compares the table's
// images with the loaded ones, flags those that changed stale; 1 when none did.
static int compare_loaded_images(void) {
    atomic_fetch_add(&g_table_readers, 1);  // the table is not freed while it is compared
    const image_table *table = atomic_load(&g_table);
    int matches = 1;
    if (table) {
        unsigned char buffer[CHECK_BUFFER_BYTES];
        struct iovec local[CHECK_BATCH], remote[CHECK_BATCH];
        const table_image *batch[CHECK_BATCH];
        size_t index = 0;
        const pid_t self = getpid();
        while (index < table->image_count) {
            size_t count = 0, used = 0;
            for (; index < table->image_count && count < CHECK_BATCH; index++) {
                const table_image *image = &table->images[index];
                const size_t length = (size_t)image->phnum * sizeof(ElfW(Phdr));
                if (image->live_phdr == 0 || length == 0 || atomic_load(&image->stale)) continue;
                if (used + length > sizeof buffer) break;
                local[count] = (struct iovec){.iov_base = buffer + used, .iov_len = length};
                remote[count] = (struct iovec){.iov_base = (void *)image->live_phdr, .iov_len = length};
                batch[count++] = image;
                used += length;
            }
            if (count == 0) {
                if (index < table->image_count && (size_t)table->images[index].phnum * sizeof(ElfW(Phdr)) > sizeof buffer) {
                    index++;  // program headers too many to compare (never seen): that image is not checked
                }
                continue;
            }
            // A short read stops at the first image whose headers are no longer mapped (it was unloaded); the
            // images after it in the batch are read one by one.
            const ssize_t got = process_vm_readv(self, local, count, remote, count, 0);
            size_t read_through = got < 0 ? 0 : (size_t)got;
            for (size_t item = 0; item < count; item++) {
                int same;
                if (read_through >= local[item].iov_len) {
                    read_through -= local[item].iov_len;
                    same = memcmp(local[item].iov_base, batch[item]->phdr, local[item].iov_len) == 0;
                } else {
                    read_through = 0;
                    same = process_vm_readv(self, &local[item], 1, &remote[item], 1, 0) ==
                               (ssize_t)local[item].iov_len &&
                           memcmp(local[item].iov_base, batch[item]->phdr, local[item].iov_len) == 0;
                }
                if (!same) {
                    atomic_store((_Atomic int *)&batch[item]->stale, 1);
                    matches = 0;
                }
            }
        }
    }
    atomic_fetch_sub(&g_table_readers, 1);
    return matches;
}

int cstallmon_table_check_loaded_images(void) {
    const int matches = compare_loaded_images();
    return atomic_exchange(&g_flush_owed, 0) ? 0 : matches;
}

// MARK: - The refresher thread (NOT async-signal-safe)

// dl_iterate_phdr waits for the loader's list lock, which a thread may hold for long (a dl_iterate_phdr callback
// that does real work, a slow dlclose): the watchdog must never wait for it. A thread of its own refreshes the table
// when a capture asks; the capture goes on with the table as it is.
static _Atomic uint32_t g_refresh_requests;  // futex word
static _Atomic int g_refresher_started;

// NOT async-signal-safe: the refresher thread's body (all signals blocked on it).
static void *refresher_main(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint32_t served = atomic_load(&g_refresh_requests);
    for (;;) {
        const uint32_t requested = atomic_load(&g_refresh_requests);
        if (requested == served) {
            struct timespec idle = {.tv_sec = 1, .tv_nsec = 0};  // and retired tables get freed now and then
            syscall(SYS_futex, (int32_t *)&g_refresh_requests, FUTEX_WAIT_PRIVATE, (int32_t)served, &idle, NULL, 0);
            if (atomic_load(&g_refresh_requests) == served) {
                pthread_mutex_lock(&g_table_mutex);
                free_retired_if_quiet();
                pthread_mutex_unlock(&g_table_mutex);
            }
            continue;
        }
        served = requested;
        cstallmon_table_refresh();
    }
    return NULL;
}

int cstallmon_table_start_refresher(void) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_refresher_started, &expected, 1)) return 0;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attributes, 256 * 1024);
    pthread_t thread;
    const int created = pthread_create(&thread, &attributes, refresher_main, NULL);
    pthread_attr_destroy(&attributes);
    if (created != 0) {
        atomic_store(&g_refresher_started, 0);
        return -1;
    }
    pthread_setname_np(thread, "stallmon-images");
    return 0;
}

// At most one wake-up of the refresher per this interval: waking a thread is a context switch on a machine whose
// cores the captured thread needs too. An object loaded within it may end a stack as unknown-image until then.
#define CSTALLMON_REFRESH_INTERVAL_NS (20 * 1000000ULL)
static _Atomic uint64_t g_last_refresh_request_ns;

void cstallmon_table_request_refresh(int urgent) {
    const uint64_t now = monotonic_ns();
    uint64_t last = atomic_load_explicit(&g_last_refresh_request_ns, memory_order_relaxed);
    if (!urgent && now - last < CSTALLMON_REFRESH_INTERVAL_NS) return;
    if (!atomic_compare_exchange_strong(&g_last_refresh_request_ns, &last, now)) return;  // another watchdog did
    atomic_fetch_add(&g_refresh_requests, 1);
    syscall(SYS_futex, (int32_t *)&g_refresh_requests, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

// MARK: - Reading (async-signal-safe: atomics and reads of the immutable table)

void cstallmon_table_enter(void) {
    atomic_fetch_add(&g_table_readers, 1);
    tls_in_handler = 1;
}

void cstallmon_table_exit(void) {
    tls_in_handler = 0;
    atomic_fetch_sub(&g_table_readers, 1);
}

int cstallmon_table_range_of(uintptr_t address, uintptr_t *low_out, uintptr_t *high_out) {
    const image_table *table = atomic_load(&g_table);
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
    const image_table *table = atomic_load(&g_table);
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
    const int changed = !compare_loaded_images();
    if (changed) atomic_store(&g_flush_owed, 1);
    cstallmon_table_request_refresh(changed);
    atomic_fetch_add(&g_table_readers, 1);  // the table is not freed while it is walked
    const int result = walk_table(callback, data);
    atomic_fetch_sub(&g_table_readers, 1);
    return result;
}

// libunwind.so's GOT slot for dl_iterate_phdr points here once cstallmon_table_patch_unwinder ran. Inside our handler
// (async-signal-safe): the table. Outside it: the loader, never waited for long (iterate_outside_handler).
// (The bench's and the fault suite's through-the-loader mode, the design before the table, is exactly dl_iterate_phdr
// for everyone: its handler does not count itself in.)
static int table_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data) {
    if (atomic_load_explicit(&g_state.through_loader, memory_order_relaxed)) return dl_iterate_phdr(callback, data);
    if (!tls_in_handler) return iterate_outside_handler(callback, data);
    return walk_table(callback, data);
}

// MARK: - Pointing libunwind at the table (NOT async-signal-safe: once, at install)

#define CSTALLMON_STRINGIFY2(name) #name
#define CSTALLMON_STRINGIFY(name) CSTALLMON_STRINGIFY2(name)

#if defined(__x86_64__)
#define RELOCATION_JUMP_SLOT R_X86_64_JUMP_SLOT
#define RELOCATION_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define RELOCATION_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define RELOCATION_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct {
    uintptr_t base;
    uintptr_t relro_low, relro_high;
} relro_search;

// NOT async-signal-safe (a dl_iterate_phdr callback, at install). Finds the PT_GNU_RELRO range of one image.
static int find_relro(struct dl_phdr_info *info, size_t size, void *context) {
    (void)size;
    relro_search *search = context;
    if (info->dlpi_addr != search->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_GNU_RELRO) continue;
        search->relro_low = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        search->relro_high = search->relro_low + info->dlpi_phdr[i].p_memsz;
    }
    return 1;
}

// NOT async-signal-safe (mprotect; at install only). Writes `value` into the GOT slot at `slot`, making its page writable for the write if RELRO made it read-only.
static int write_slot(void **slot, void *value, const relro_search *relro) {
    const uintptr_t page_size = g_state.page_size ? g_state.page_size : 4096;
    const uintptr_t page = (uintptr_t)slot & ~(page_size - 1);
    const int protected_slot = (uintptr_t)slot >= relro->relro_low && (uintptr_t)slot < relro->relro_high;
    if (protected_slot && mprotect((void *)page, page_size, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);  // one aligned word: a concurrent caller sees old or new
    if (protected_slot) mprotect((void *)page, page_size, PROT_READ);
    return 0;
}

int cstallmon_table_patch_unwinder(void) {
#if defined(RELOCATION_JUMP_SLOT)
    if (atomic_load(&g_table_patched)) return 0;
    // The library that holds libunwind's local unwinder: where its step function is.
    void *step = dlsym(RTLD_DEFAULT, CSTALLMON_STRINGIFY(unw_step));
    Dl_info info;
    struct link_map *map = NULL;
    if (!step || !dladdr1(step, &info, (void **)&map, RTLD_DL_LINKMAP) || !map || !map->l_ld) return -1;
    const uintptr_t base = map->l_addr;
    // glibc relocates these d_ptr values in place on most targets; add the base where it did not.
#define ADJUST(pointer) ((uintptr_t)(pointer) < base ? (uintptr_t)(pointer) + base : (uintptr_t)(pointer))
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Rela) *plt = NULL, *rela = NULL;
    size_t plt_size = 0, rela_size = 0, string_size = 0;
    for (const ElfW(Dyn) *entry = map->l_ld; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)ADJUST(entry->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)ADJUST(entry->d_un.d_ptr); break;
        case DT_STRSZ: string_size = entry->d_un.d_val; break;
        case DT_JMPREL: plt = (const ElfW(Rela) *)ADJUST(entry->d_un.d_ptr); break;
        case DT_PLTRELSZ: plt_size = entry->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)ADJUST(entry->d_un.d_ptr); break;
        case DT_RELASZ: rela_size = entry->d_un.d_val; break;
        default: break;
        }
    }
#undef ADJUST
    if (!symbols || !strings) return -1;
    relro_search relro = {.base = base};
    dl_iterate_phdr(find_relro, &relro);
    int patched = 0;
    const struct {
        const ElfW(Rela) *table;
        size_t size;
    } tables[] = {{plt, plt_size}, {rela, rela_size}};
    for (size_t t = 0; t < 2; t++) {
        if (!tables[t].table) continue;
        for (size_t i = 0; i < tables[t].size / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *relocation = &tables[t].table[i];
            const uint32_t type = (uint32_t)ELF64_R_TYPE(relocation->r_info);
            if (type != RELOCATION_JUMP_SLOT && type != RELOCATION_GLOB_DAT) continue;
            const ElfW(Word) name = symbols[ELF64_R_SYM(relocation->r_info)].st_name;
            if (string_size && name >= string_size) continue;
            if (strcmp(strings + name, "dl_iterate_phdr") != 0) continue;
            if (write_slot((void **)(base + relocation->r_offset), (void *)table_dl_iterate_phdr, &relro) == 0) {
                patched++;
            }
        }
    }
    if (patched == 0) return -1;
    atomic_store(&g_table_patched, 1);
    return 0;
#else
    return -1;
#endif
}

int cstallmon_table_is_patched(void) { return atomic_load(&g_table_patched); }
