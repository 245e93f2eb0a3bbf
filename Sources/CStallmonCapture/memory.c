// Non-faulting reads of this process's own memory, for the watchdog's look at lock words (see the header).
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE
#endif

#include "CStallmonCapture.h"

#include <CStallmonLoopShims.h>
#include <sys/uio.h>
#include <unistd.h>

int cstallmon_read_own_memory(uintptr_t address, void *buffer, size_t length) {
    struct iovec local = {.iov_base = buffer, .iov_len = length};
    struct iovec remote = {.iov_base = (void *)address, .iov_len = length};
    long got = cstallmon_vm_readv(&local, 1, &remote, 1);
    return got == (ssize_t)length ? 0 : -1;
}
