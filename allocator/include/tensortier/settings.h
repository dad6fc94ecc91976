// Settings from the environment (TENSORTIER_*), read one way everywhere: a switch is 0, 1, off or
// on (any case); a number is a whole number, or for rates a decimal, within the range the setting
// can have on a real machine; anything else, an empty value included where it is set, is refused
// with the setting's name, what was given and what it takes. Every TENSORTIER_* variable of the
// runtime, the allocator and the interposer goes through here (docs/USAGE.md lists them).
//
// Thread safety: pure functions; the env_* ones read the environment (not while another thread
// changes it).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier::settings {

// Errors: kInvalidArgument naming `name`, quoting `text` and saying what it takes.
Result<bool> parse_switch(std::string_view name, std::string_view text);
Result<std::uint64_t> parse_whole(std::string_view name, std::string_view text, std::uint64_t least,
                                  std::uint64_t most);
// A finite decimal in [least, most], `unit` naming what it counts ("GB/s") in errors.
Result<double> parse_number(std::string_view name, std::string_view text, double least, double most,
                            std::string_view unit);

// The same for the environment variable `name`: nullopt where it is unset.
Result<std::optional<bool>> env_switch(const char* name);
Result<std::optional<std::uint64_t>> env_whole(const char* name, std::uint64_t least, std::uint64_t most);
Result<std::optional<double>> env_number(const char* name, double least, double most, std::string_view unit);

}  // namespace tensortier::settings
