#ifndef C_STALLMON_SYMBOLS_H
#define C_STALLMON_SYMBOLS_H

// Address → symbol, module and source line for this process, with elfutils' libdwfl. dladdr only sees the dynamic
// symbol table, so it cannot name Swift's internal and private functions; libdw reads the full ELF symbol table
// (.symtab) and DWARF line tables, from the binary or from its separate debug file found by build id.
//
// None of these functions is async-signal-safe: they allocate and read files. They run on the report writer
// thread and in the CLI, never in the signal handler or on the monitored loop thread. A symbolizer is not
// thread-safe; give each thread its own.

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cstallmon_symbolizer cstallmon_symbolizer;

/// A function the compiler inlined at an address, from DWARF's DW_TAG_inlined_subroutine scopes.
typedef struct {
    const char *function;       ///< linkage (mangled) name, else the plain name; NULL when DWARF names none
    const char *source_file;    ///< where in `function` the address is (innermost) or the next inner call sits
    int32_t line;               ///< 0 when unknown
    int32_t column;
} cstallmon_inlined_frame;

/// At most this many inlined functions are reported per address (innermost kept).
#define CSTALLMON_MAX_INLINED 32

/// What is known of one address. Strings point into the symbolizer and stay valid until the next
/// cstallmon_symbolizer_refresh or destroy; copy them. `inlined` is valid until the next cstallmon_symbolize.
typedef struct {
    const char *module_path;    ///< NULL when no module maps the address
    uintptr_t module_start;     ///< lowest address of the module
    uintptr_t module_bias;      ///< load bias (address - bias = ELF virtual address)
    const char *symbol;         ///< raw (mangled) symbol name, or NULL
    uint64_t symbol_offset;     ///< address - symbol start
    /// From DWARF line info, or NULL. When code was inlined at the address, this is the call site in `symbol`
    /// of the outermost inlined function, and the innermost line is in `inlined[0]`.
    const char *source_file;
    int32_t line;               ///< 0 when unknown
    int32_t column;
    /// Functions inlined at the address, innermost first (each was inlined into the next, the last into
    /// `symbol`); NULL when there are none or no DWARF describes them.
    const cstallmon_inlined_frame *inlined;
    int32_t inlined_count;
} cstallmon_symbol;

/// A symbolizer for the live process `pid` (modules from /proc/PID/maps). `debug_path` is the separate debug
/// file search path in elfutils syntax (NULL: the default, which includes /usr/lib/debug and .build-id lookups).
/// Returns NULL on failure. NOT async-signal-safe.
cstallmon_symbolizer *cstallmon_symbolizer_create_for_process(pid_t pid, const char *debug_path);

/// A symbolizer for files named explicitly (offline re-symbolication): report each module first. NOT AS-safe.
cstallmon_symbolizer *cstallmon_symbolizer_create_offline(const char *debug_path);

/// Adds a module file mapped at `bias` (offline mode). Returns 0, or -1 when the file cannot be read. NOT AS-safe.
int cstallmon_symbolizer_add_module(cstallmon_symbolizer *symbolizer, const char *path, uintptr_t bias);

/// Re-reads /proc/PID/maps, e.g. after dlopen. Invalidates returned strings. NOT async-signal-safe.
int cstallmon_symbolizer_refresh(cstallmon_symbolizer *symbolizer);

/// Looks `address` up. Pass the program counter for frame 0 and return address - 1 for the others, so the call
/// instruction's line is found. Returns 1 when a module maps the address, 0 otherwise. NOT async-signal-safe.
int cstallmon_symbolize(cstallmon_symbolizer *symbolizer, uintptr_t address, cstallmon_symbol *out);

void cstallmon_symbolizer_destroy(cstallmon_symbolizer *symbolizer);

/// Demangles a Swift symbol with the runtime's own demangler (swift_demangle in libswiftCore) into `out`.
/// Returns 1 when it was a Swift symbol, else 0 (out untouched). NOT async-signal-safe (allocates).
int cstallmon_demangle_swift(const char *mangled, char *out, size_t out_size);

/// Demangles an Itanium C++ symbol with __cxa_demangle. Returns 1 on success. NOT async-signal-safe.
int cstallmon_demangle_cxx(const char *mangled, char *out, size_t out_size);

#ifdef __cplusplus
}
#endif
#endif
