#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonSymbols.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
#include <stdlib.h>
#include <string.h>

// Nothing in this file is async-signal-safe.

struct cstallmon_symbolizer {
    Dwfl *dwfl;
    Dwfl_Callbacks callbacks;
    char *debug_path;
    pid_t pid;  // 0 in offline mode
    cstallmon_inlined_frame inlined[CSTALLMON_MAX_INLINED];  // the last lookup's inlined functions
};

static cstallmon_symbolizer *create(const char *debug_path, int offline) {
    cstallmon_symbolizer *symbolizer = calloc(1, sizeof *symbolizer);
    if (!symbolizer) return NULL;
    if (debug_path) symbolizer->debug_path = strdup(debug_path);
    symbolizer->callbacks.find_elf = offline ? dwfl_build_id_find_elf : dwfl_linux_proc_find_elf;
    symbolizer->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    symbolizer->callbacks.debuginfo_path = &symbolizer->debug_path;
    symbolizer->dwfl = dwfl_begin(&symbolizer->callbacks);
    if (!symbolizer->dwfl) {
        free(symbolizer->debug_path);
        free(symbolizer);
        return NULL;
    }
    return symbolizer;
}

cstallmon_symbolizer *cstallmon_symbolizer_create_for_process(pid_t pid, const char *debug_path) {
    cstallmon_symbolizer *symbolizer = create(debug_path, 0);
    if (!symbolizer) return NULL;
    symbolizer->pid = pid;
    if (cstallmon_symbolizer_refresh(symbolizer) != 0) {
        cstallmon_symbolizer_destroy(symbolizer);
        return NULL;
    }
    return symbolizer;
}

cstallmon_symbolizer *cstallmon_symbolizer_create_offline(const char *debug_path) {
    return create(debug_path, 1);
}

int cstallmon_symbolizer_add_module(cstallmon_symbolizer *symbolizer, const char *path, uintptr_t bias) {
    dwfl_report_begin_add(symbolizer->dwfl);
    Dwfl_Module *module = dwfl_report_elf(symbolizer->dwfl, path, path, -1, (GElf_Addr)bias, false);
    dwfl_report_end(symbolizer->dwfl, NULL, NULL);
    return module ? 0 : -1;
}

int cstallmon_symbolizer_refresh(cstallmon_symbolizer *symbolizer) {
    if (symbolizer->pid == 0) return 0;
    dwfl_report_begin(symbolizer->dwfl);
    int rc = dwfl_linux_proc_report(symbolizer->dwfl, symbolizer->pid);
    dwfl_report_end(symbolizer->dwfl, NULL, NULL);
    return rc == 0 ? 0 : -1;
}

// The compile unit holding `address`, and the bias to subtract for DWARF addresses. Swift's toolchain emits no
// .debug_aranges and libdw 0.188 does not infer them, so dwfl_module_addrdie finds no CU for Swift code: walk the
// CUs' own address ranges then.
static Dwarf_Die *find_compile_unit(Dwfl_Module *module, Dwarf_Addr address, Dwarf_Addr *bias) {
    Dwarf_Die *cu = dwfl_module_addrdie(module, address, bias);
    if (cu) return cu;
    while ((cu = dwfl_module_nextcu(module, cu, bias)) != NULL) {
        const Dwarf_Addr relative = address - *bias;
        Dwarf_Addr base = 0, start = 0, end = 0;
        ptrdiff_t offset = 0;
        while ((offset = dwarf_ranges(cu, offset, &base, &start, &end)) > 0) {
            if (relative >= start && relative < end) return cu;
        }
    }
    return NULL;
}

// A function DIE's name for demangling: the linkage name (also through DW_AT_abstract_origin, where an inlined
// instance keeps it), else the plain name.
static const char *function_name(Dwarf_Die *die) {
    Dwarf_Attribute attribute;
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attribute));
    if (!name) name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attribute));
    if (!name) name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attribute));
    return name;
}

// Where the innermost scope around `relative` (the function, or the inlined instance or block the compiler put it
// in) begins: the start of its range that holds `relative`; `relative` itself when none is found.
static Dwarf_Addr innermost_scope_start(Dwarf_Die *cu, Dwarf_Addr relative) {
    Dwarf_Die *scopes = NULL;
    Dwarf_Addr found = relative;
    if (dwarf_getscopes(cu, relative, &scopes) > 0) {
        Dwarf_Addr base = 0, start = 0, end = 0;
        ptrdiff_t offset = 0;
        while ((offset = dwarf_ranges(&scopes[0], offset, &base, &start, &end)) > 0) {
            if (relative >= start && relative < end) {
                found = start;
                break;
            }
        }
    }
    free(scopes);
    return found;
}

// Code the line table marks line 0 (compiler-generated: Swift's debug builds mark so the call that advances a `for`
// loop's iterator) is given the last nonzero line before it in the same sequence of the line table, as
// `llvm-symbolizer --skip-line-zero` does, but never one before the innermost scope that holds it (the function, or
// the inlined instance): the line is then that scope's own. False when there is none.
static bool line_before(Dwarf_Die *cu, Dwarf_Addr relative, int *line_number, int *column, const char **file) {
    Dwarf_Lines *lines = NULL;
    size_t count = 0;
    if (dwarf_getsrclines(cu, &lines, &count) != 0 || count == 0) return false;
    const Dwarf_Addr scope_start = innermost_scope_start(cu, relative);
    // libdw sorts the rows by address: the last row at or before `relative`.
    size_t low = 0, high = count;
    while (low < high) {
        const size_t middle = low + (high - low) / 2;
        Dwarf_Addr address = 0;
        dwarf_lineaddr(dwarf_onesrcline(lines, middle), &address);
        if (address <= relative) low = middle + 1; else high = middle;
    }
    for (size_t index = low; index-- > 0;) {
        Dwarf_Line *row = dwarf_onesrcline(lines, index);
        Dwarf_Addr address = 0;
        bool end_of_sequence = false;
        dwarf_lineaddr(row, &address);
        dwarf_lineendsequence(row, &end_of_sequence);
        // An end-of-sequence row before the one found ends the previous sequence: ours began after it.
        if (address < scope_start || (end_of_sequence && index + 1 < low)) return false;
        if (end_of_sequence) continue;
        int number = 0;
        if (dwarf_lineno(row, &number) == 0 && number > 0) {
            *line_number = number;
            dwarf_linecol(row, column);
            *file = dwarf_linesrc(row, NULL, NULL);
            return *file != NULL;
        }
    }
    return false;
}

// Fills out->inlined from the DW_TAG_inlined_subroutine scopes around `relative`, innermost first, as
// `eu-addr2line -i` does: the innermost function is at the line table's line; each one's DW_AT_call_file/line is
// where the next outer function called it. The outermost call site becomes the physical frame's line.
static void expand_inlined(cstallmon_symbolizer *symbolizer, Dwarf_Die *cu, Dwarf_Addr relative,
                           cstallmon_symbol *out) {
    Dwarf_Die *scopes = NULL;
    int count = dwarf_getscopes(cu, relative, &scopes);
    if (count <= 0) {
        free(scopes);
        return;
    }
    // dwarf_getscopes continues past an inlined instance into its abstract origin's scopes; the concrete chain
    // of callers comes from the innermost DIE's parents.
    Dwarf_Die innermost = scopes[0];
    free(scopes);
    scopes = NULL;
    count = dwarf_getscopes_die(&innermost, &scopes);
    if (count <= 0) {
        free(scopes);
        return;
    }
    Dwarf_Files *files = NULL;
    size_t file_count = 0;
    if (dwarf_getsrcfiles(cu, &files, &file_count) != 0) files = NULL;
    const char *file = out->source_file;
    int32_t line = out->line, column = out->column;
    int found = 0;
    for (int i = 0; i < count && found < CSTALLMON_MAX_INLINED; i++) {
        Dwarf_Die *scope = &scopes[i];
        if (dwarf_tag(scope) != DW_TAG_inlined_subroutine) continue;
        cstallmon_inlined_frame *frame = &symbolizer->inlined[found++];
        frame->function = function_name(scope);
        frame->source_file = file;
        frame->line = line;
        frame->column = column;
        // Where the caller (the next scope out) called this one.
        Dwarf_Attribute attribute;
        Dwarf_Word value = 0;
        file = NULL;
        line = 0;
        column = 0;
        if (files && dwarf_formudata(dwarf_attr(scope, DW_AT_call_file, &attribute), &value) == 0 &&
            value < file_count) {
            file = dwarf_filesrc(files, value, NULL, NULL);
        }
        if (dwarf_formudata(dwarf_attr(scope, DW_AT_call_line, &attribute), &value) == 0) line = (int32_t)value;
        if (dwarf_formudata(dwarf_attr(scope, DW_AT_call_column, &attribute), &value) == 0) column = (int32_t)value;
    }
    free(scopes);
    if (found == 0) return;
    out->inlined = symbolizer->inlined;
    out->inlined_count = found;
    out->source_file = file;
    out->line = line > 0 ? line : 0;
    out->column = line > 0 ? column : 0;
}

int cstallmon_symbolize(cstallmon_symbolizer *symbolizer, uintptr_t address, cstallmon_symbol *out) {
    memset(out, 0, sizeof *out);
    Dwfl_Module *module = dwfl_addrmodule(symbolizer->dwfl, (Dwarf_Addr)address);
    if (!module) return 0;
    Dwarf_Addr start = 0, bias = 0;
    const char *main_file = NULL;
    const char *name = dwfl_module_info(module, NULL, &start, NULL, NULL, NULL, &main_file, NULL);
    out->module_path = main_file ? main_file : name;
    out->module_start = (uintptr_t)start;
    if (dwfl_module_getelf(module, &bias)) out->module_bias = (uintptr_t)bias;

    GElf_Off offset = 0;
    GElf_Sym symbol;
    const char *symbol_name = dwfl_module_addrinfo(module, (GElf_Addr)address, &offset, &symbol, NULL, NULL, NULL);
    if (symbol_name) {
        out->symbol = symbol_name;
        out->symbol_offset = offset;
    }
    Dwarf_Addr dwarf_bias = 0;
    Dwarf_Die *cu = find_compile_unit(module, (Dwarf_Addr)address, &dwarf_bias);
    if (!cu) return 1;
    const Dwarf_Addr relative = (Dwarf_Addr)address - dwarf_bias;
    Dwarf_Line *line = dwarf_getsrc_die(cu, relative);
    if (line) {
        int line_number = 0, column = 0;
        const char *file = dwarf_linesrc(line, NULL, NULL);
        dwarf_lineno(line, &line_number);
        dwarf_linecol(line, &column);
        if (line_number <= 0) line_before(cu, relative, &line_number, &column, &file);
        // The file even at line 0 with no line before it in its scope: the report keeps it, without a line.
        if (file) {
            out->source_file = file;
            out->line = line_number > 0 ? line_number : 0;
            out->column = line_number > 0 ? column : 0;
        }
    }
    expand_inlined(symbolizer, cu, relative, out);
    return 1;
}

void cstallmon_symbolizer_destroy(cstallmon_symbolizer *symbolizer) {
    if (!symbolizer) return;
    dwfl_end(symbolizer->dwfl);
    free(symbolizer->debug_path);
    free(symbolizer);
}

// MARK: - Demangling

// Exported by libswiftCore, which every Swift program links; the runtime's own demangler.
extern char *swift_demangle(const char *mangled, size_t length, char *output, size_t *output_size, uint32_t flags);
// Exported by libstdc++ / libc++abi, which the Swift runtime links.
extern char *__cxa_demangle(const char *mangled, char *output, size_t *length, int *status);

static int copy_out(char *text, char *out, size_t out_size) {
    if (!text) return 0;
    strncpy(out, text, out_size - 1);
    out[out_size - 1] = '\0';
    free(text);
    return 1;
}

int cstallmon_demangle_swift(const char *mangled, char *out, size_t out_size) {
    if (!mangled || out_size == 0) return 0;
    if (!(strncmp(mangled, "$s", 2) == 0 || strncmp(mangled, "_$s", 3) == 0 || strncmp(mangled, "$S", 2) == 0 ||
          strncmp(mangled, "_T0", 3) == 0 || strncmp(mangled, "$e", 2) == 0)) {
        return 0;
    }
    return copy_out(swift_demangle(mangled, strlen(mangled), NULL, NULL, 0), out, out_size);
}

int cstallmon_demangle_cxx(const char *mangled, char *out, size_t out_size) {
    if (!mangled || out_size == 0 || strncmp(mangled, "_Z", 2) != 0) return 0;
    int status = 0;
    return copy_out(__cxa_demangle(mangled, NULL, NULL, &status), out, out_size);
}
