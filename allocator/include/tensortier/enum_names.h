// An enum's names from one table per enum, and back: every to_string and name parser of the
// project reads its enum's table instead of a switch of its own. (magic_enum would derive names
// from identifiers, but Debian 12 packages no version of it, and some names here are phrases.)
//
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   name_of(Color::kRed, kColorNames) == "red";  value_named("blue", kColorNames) == Color::kBlue
//
// Thread safety: pure functions over constant tables.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tensortier {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value`; `unknown` for a value the table does not list.
template <typename E, std::size_t N>
constexpr std::string_view name_of(E value, const EnumName<E> (&table)[N],
                                   std::string_view unknown = "unknown") {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

// The value named `name`; none for a name the table does not list.
template <typename E, std::size_t N>
constexpr std::optional<E> value_named(std::string_view name, const EnumName<E> (&table)[N]) {
  for (const EnumName<E>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// Every name, comma-separated, for error messages.
template <typename E, std::size_t N>
std::string names_of(const EnumName<E> (&table)[N]) {
  std::string names;
  for (const EnumName<E>& entry : table) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  return names;
}

}  // namespace tensortier
