// The image table checked against the objects the loader has now, before each capture (see image_table.c).
#include "capture_state.h"
#include "image_table.h"

#include <CStallmonLoopShims.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

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
_Atomic int cstallmon_table_flush_owed;

// NOT async-signal-safe (process_vm_readv is, but this is only ever called outside handlers). Compares the table's
// images with the loaded ones, flags those that changed stale; 1 when none did.
int cstallmon_table_compare_loaded_images(void) {
    atomic_fetch_add(&cstallmon_table_readers, 1);  // the table is not freed while it is compared
    const image_table *table = atomic_load(&cstallmon_table_current);
    int matches = 1;
    if (table) {
        unsigned char buffer[CHECK_BUFFER_BYTES];
        struct iovec local[CHECK_BATCH], remote[CHECK_BATCH];
        const table_image *batch[CHECK_BATCH];
        size_t index = 0;
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
            const ssize_t got = cstallmon_vm_readv(local, count, remote, count);
            size_t read_through = got < 0 ? 0 : (size_t)got;
            for (size_t item = 0; item < count; item++) {
                int same;
                if (read_through >= local[item].iov_len) {
                    read_through -= local[item].iov_len;
                    same = memcmp(local[item].iov_base, batch[item]->phdr, local[item].iov_len) == 0;
                } else {
                    read_through = 0;
                    same = cstallmon_vm_readv(&local[item], 1, &remote[item], 1) ==
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
    atomic_fetch_sub(&cstallmon_table_readers, 1);
    return matches;
}

int cstallmon_table_check_loaded_images(void) {
    const int matches = cstallmon_table_compare_loaded_images();
    return atomic_exchange(&cstallmon_table_flush_owed, 0) ? 0 : matches;
}