// load_module_symbol (see load_module.h).
#include "tensortier/load_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace tensortier {

Result<void*> load_module_symbol(std::string_view file_name, const std::string& build_path,
                                 const void* anchor, const char* symbol) {
  std::vector<std::string> places;
  if (Dl_info info{}; anchor != nullptr && dladdr(anchor, &info) != 0 && info.dli_fname != nullptr)
    places.push_back((std::filesystem::path(info.dli_fname).parent_path() / file_name).string());
  if (!build_path.empty()) places.push_back(build_path);
  places.emplace_back(file_name);
  std::string tried;
  for (const std::string& place : places) {
    if (place.find('/') != std::string::npos && !std::filesystem::exists(place)) continue;
    void* module = dlopen(place.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* why = dlerror();
      tried += fmt::format("; {}: {}", place, why != nullptr ? why : "?");
      continue;
    }
    if (void* found = dlsym(module, symbol); found != nullptr) return found;
    tried += fmt::format("; {}: no {} in it", place, symbol);
  }
  return unavailable(
      fmt::format("the module {} could not be loaded{}", file_name, tried.empty() ? " (not found)" : tried));
}

}  // namespace tensortier
