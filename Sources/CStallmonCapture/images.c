#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonCapture.h"

#include <elf.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

// The image map every report keeps (path, build id, load bias), so an address can be symbolicated again offline.

typedef struct {
    cstallmon_image_visitor visitor;
    void *context;
    char executable[PATH_MAX];
    int index;
} iteration_state;

// NOT async-signal-safe (runs under the loader lock). Finds NT_GNU_BUILD_ID in the image's PT_NOTE segments.
static void find_build_id(const struct dl_phdr_info *info, const uint8_t **bytes, uint32_t *size) {
    *bytes = NULL;
    *size = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (header->p_type != PT_NOTE) continue;
        const uint8_t *cursor = (const uint8_t *)(info->dlpi_addr + header->p_vaddr);
        const uint8_t *end = cursor + header->p_memsz;
        while (cursor + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *note = (const ElfW(Nhdr) *)cursor;
            const uint8_t *name = cursor + sizeof(ElfW(Nhdr));
            const uint8_t *desc = name + ((note->n_namesz + 3u) & ~3u);
            const uint8_t *next = desc + ((note->n_descsz + 3u) & ~3u);
            if (next > end) break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                *bytes = desc;
                *size = note->n_descsz;
                return;
            }
            cursor = next;
        }
    }
}

static int visit(struct dl_phdr_info *info, size_t size, void *raw) {
    (void)size;
    iteration_state *state = raw;
    cstallmon_image image;
    memset(&image, 0, sizeof image);
    image.load_bias = info->dlpi_addr;
    uintptr_t low = UINTPTR_MAX, high = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (header->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + header->p_vaddr;
        uintptr_t end = start + header->p_memsz;
        if (start < low) low = start;
        if (end > high) high = end;
    }
    image.start = low == UINTPTR_MAX ? 0 : low;
    image.end = high;
    find_build_id(info, &image.build_id, &image.build_id_size);
    const char *name = info->dlpi_name;
    if (state->index == 0 && (name == NULL || name[0] == '\0')) name = state->executable;  // the main program
    image.path = name ? name : "";
    state->index++;
    state->visitor(&image, state->context);
    return 0;
}

void cstallmon_for_each_image(cstallmon_image_visitor visitor, void *context) {
    iteration_state state;
    memset(&state, 0, sizeof state);
    state.visitor = visitor;
    state.context = context;
    ssize_t length = readlink("/proc/self/exe", state.executable, sizeof state.executable - 1);
    state.executable[length > 0 ? length : 0] = '\0';
    dl_iterate_phdr(visit, &state);
}
