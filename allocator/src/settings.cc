// Settings from the environment (see settings.h).
#include "tensortier/settings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace tensortier::settings {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

Result<bool> parse_switch(std::string_view name, std::string_view text) {
  const std::string value = lower(text);
  if (value == "1" || value == "on") return true;
  if (value == "0" || value == "off") return false;
  return invalid_argument(fmt::format("{}='{}': give 0, 1, off or on (any case)", name, text));
}

Result<std::uint64_t> parse_whole(std::string_view name, std::string_view text, std::uint64_t least,
                                  std::uint64_t most) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < least ||
      value > most) {
    return invalid_argument(
        fmt::format("{}='{}': give a whole number from {} to {}", name, text, least, most));
  }
  return value;
}

Result<double> parse_number(std::string_view name, std::string_view text, double least, double most,
                            std::string_view unit) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = copy.empty() ? NAN : std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value) || value < least ||
      value > most) {
    return invalid_argument(
        fmt::format("{}='{}': give a number of {} from {} to {}", name, text, unit, least, most));
  }
  return value;
}

Result<std::optional<bool>> env_switch(const char* name) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see settings.h
  if (text == nullptr) return std::optional<bool>{};
  Result<bool> value = parse_switch(name, text);
  if (!value) return value.status();
  return std::optional<bool>{*value};
}

Result<std::optional<std::uint64_t>> env_whole(const char* name, std::uint64_t least, std::uint64_t most) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see settings.h
  if (text == nullptr) return std::optional<std::uint64_t>{};
  Result<std::uint64_t> value = parse_whole(name, text, least, most);
  if (!value) return value.status();
  return std::optional<std::uint64_t>{*value};
}

Result<std::optional<double>> env_number(const char* name, double least, double most, std::string_view unit) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see settings.h
  if (text == nullptr) return std::optional<double>{};
  Result<double> value = parse_number(name, text, least, most, unit);
  if (!value) return value.status();
  return std::optional<double>{*value};
}

}  // namespace tensortier::settings
