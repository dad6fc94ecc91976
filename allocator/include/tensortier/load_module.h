// Parts of tensortier that pull in large libraries only some runs need (the GPU backend: the CUDA
// runtime, cuDNN, cuBLAS) are modules loaded when a run asks for them (a GPU tier, --backend cuda),
// so that a CPU-only run neither loads them nor needs the address space they take (a run under a
// virtual-memory cap of a few hundred MB could not start with them).
//
// Thread safety: any thread (dlopen is).
#pragma once

#include <string>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier {

// The address of `symbol` in the module `file_name`, loaded (once; never unloaded) from the
// directory of the library that holds `anchor` (an address in it: installed modules sit beside the
// libraries), else from `build_path` (where the build tree made it), else by name (LD_LIBRARY_PATH).
// Errors: kUnavailable naming the module, each place tried and what the loader said.
Result<void*> load_module_symbol(std::string_view file_name, const std::string& build_path,
                                 const void* anchor, const char* symbol);

}  // namespace tensortier
