// Memory-mapped model files and the bus errors they can raise.
//
// Model weights are read straight from a read-only mmap of the GGUF file (no copy: models
// are large). If another process truncates that file (or rewrites it in place, which
// `cp new.gguf model.gguf` does) while treespec runs, touching a page past the new end
// raises SIGBUS. treespec validates every tensor against the file size at open, so this
// can only happen through such a concurrent change, which is not supported: replace a
// model by writing a new file and renaming it over the old one (the running process
// keeps the old inode).
//
// To turn that crash into a clear error, the readers register their mappings here and a
// program (the treespec tool, not the library) may install a SIGBUS handler that, for a
// fault inside a registered mapping, prints one line naming the file and the offset and
// ends the process with exit status kMappedFileFaultExit. Faults elsewhere keep the
// default action (a real bug must still crash with a core dump).
#pragma once

#include <cstddef>
#include <cstdint>

namespace treespec::core {

constexpr int kMappedFileFaultExit = 1;  // as every other treespec error

// Registers [base, base + size) as a mapping of `path` (copied; long paths are cut).
// Thread-safe; at most kMaxMappedFiles at once (further ones are simply not named by
// the handler). Returns a handle for unregister_mapped_file (-1 if none was free).
constexpr int kMaxMappedFiles = 32;
int register_mapped_file(const void* base, size_t size, const char* path);
void unregister_mapped_file(int handle);

// Installs the SIGBUS handler described above (idempotent). For programs only.
void install_mapped_file_fault_handler();

}  // namespace treespec::core
