// Internal to CStallmonCapture: the table of loaded images the signal handler unwinds with, shared by its building,
// refresh and reading (image_table.c), its check against the loaded objects (image_check.c), its refresher thread
// (image_refresher.c) and the patch that points libunwind at it (unwinder_patch.c). Not part of the module's public
// header. What the table is for: image_table.c.
#ifndef CSTALLMON_IMAGE_TABLE_H
#define CSTALLMON_IMAGE_TABLE_H

#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

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

// The published table (replaced whole by a refresh, never changed after but for `stale`).
extern _Atomic(image_table *) cstallmon_table_current __attribute__((visibility("hidden")));
// Readers inside a table (handlers between cstallmon_table_enter and cstallmon_table_exit, the checks, and table
// walks outside handlers): a replaced table is freed only when this is 0.
extern _Atomic int32_t cstallmon_table_readers __attribute__((visibility("hidden")));
// Serializes refreshes (watchdogs of several monitors) and guards the retired tables.
extern pthread_mutex_t cstallmon_table_mutex __attribute__((visibility("hidden")));
// A stale image found outside a capture: the next capture's check reports it (image_check.c).
extern _Atomic int cstallmon_table_flush_owed __attribute__((visibility("hidden")));

// NOT async-signal-safe. Frees retired tables when no reader is inside any table. Call with cstallmon_table_mutex
// held.
void cstallmon_table_free_retired_if_quiet(void) __attribute__((visibility("hidden")));

// NOT async-signal-safe (outside handlers only). Compares the table's images with the loaded ones, flags those that
// changed stale; 1 when none did.
int cstallmon_table_compare_loaded_images(void) __attribute__((visibility("hidden")));

// What libunwind calls instead of dl_iterate_phdr once patched: async-signal-safe inside our handler (the table),
// never waiting for the loader outside it.
int cstallmon_table_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data)
    __attribute__((visibility("hidden")));

#endif
