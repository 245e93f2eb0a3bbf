// Points libunwind at the image table: its GOT slot for dl_iterate_phdr, in libunwind.so only, is rewritten to
// cstallmon_table_dl_iterate_phdr (see image_table.c for why). Once, at install.
#include "capture_state.h"
#include "image_table.h"

#include <dlfcn.h>
#include <elf.h>
#include <string.h>
#include <sys/mman.h>

static _Atomic int g_table_patched;

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
            if (write_slot((void **)(base + relocation->r_offset), (void *)cstallmon_table_dl_iterate_phdr, &relro) == 0) {
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
