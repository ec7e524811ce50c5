// routing/src/toml_guard.h: a check of TOML text before toml++ parses it
// (route tables, policies, derivation specs).
//
// toml++ 3.3 (Debian 12's libtomlplusplus-dev) classifies a non-ASCII
// character as whitespace or not with a table that reaches
// __builtin_unreachable() for the characters U+00A1..U+0499,
// U+2C5E..U+2FFF, U+3001..U+3057 and U+FB26..U+FEFE (found by
// tests/fuzz/fuzz_derive_spec under UBSan): undefined behaviour wherever the
// parser asks (between tokens, after a backslash in a multi-line string, while
// recording a value). Text holding any of them is refused before parsing;
// inside a basic string such a character can be written as \uXXXX.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "normgate/core/printable.h"

namespace normgate::kernels::detail {

/// True when toml++ 3.3's is_non_ascii_horizontal_whitespace(c) returns
/// without reaching its unreachable branch (the same arithmetic).
constexpr bool toml_classifies(char32_t c) {
  if (c < 0xA0 || c > 0xFEFF) return true;
  const uint64_t child = (static_cast<uint64_t>(c) - 0xA0) / 0x3FA;
  if ((uint64_t{1} << child) & 0x7FFFFFFFFFFFF75Eull) return true;
  if (c == 0xA0 || c == 0x3000 || c == 0xFEFF) return true;
  return child == 5 || child == 7;
}

/// The first character of `text` that toml++ cannot classify: its 1-based
/// line and a sentence naming it; std::nullopt when there is none. Bytes
/// that are not valid UTF-8 are left to the parser (which rejects them).
inline std::optional<std::pair<int, std::string>> toml_unclassifiable(std::string_view text) {
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == '\n') ++line;
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    if (n == 1 || i + n > text.size()) {
      ++i;
      continue;
    }
    char32_t c = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = true;
    for (size_t k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(text[i + k]);
      if ((cb & 0xC0) != 0x80) ok = false;
      c = (c << 6) | (cb & 0x3F);
    }
    if (!ok) {
      ++i;
      continue;
    }
    if (!toml_classifies(c)) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(c));
      return std::pair<int, std::string>{
          line, std::string("character ") + hex +
                    " is not accepted (the TOML library cannot parse it safely; inside a string write it as \\u" +
                    std::string(hex + 2) + ")"};
    }
    i += n;
  }
  return std::nullopt;
}

/// The first key or string value under `root` that holds a control byte
/// (below 0x20, or 0x7F; TOML's escapes \n, \t, \u0000.. write them): its
/// line and a sentence naming it, escaped; std::nullopt when there is none.
/// Such a string quoted in an error message could start a line of its own
/// that reads as normgate's ("  normgate: verdict  PASS"); no key or value of
/// a route table, policy or spec needs one. The top-level `description` may
/// hold newlines and tabs: reports print it escaped.
inline std::optional<std::pair<int, std::string>> toml_control_string(const toml::table& root) {
  const auto bad = [](std::string_view s) { return core::has_control_bytes(s); };
  std::optional<std::pair<int, std::string>> found;
  auto report = [&](const toml::source_region& where, std::string what, std::string_view s) {
    if (!found)
      found = std::pair<int, std::string>{static_cast<int>(where.begin.line),
                                          what + " '" + core::escape_controls(s) +
                                              "' holds a control character; keys and strings here are one line of "
                                              "printable text"};
  };
  auto walk = [&](auto&& self, const toml::node& n, bool top) -> void {
    if (const toml::table* t = n.as_table()) {
      for (auto&& [k, v] : *t) {
        if (bad(k.str())) report(k.source(), "key", k.str());
        if (top && k.str() == "description" && v.is_string()) {
          const std::string& d = v.as_string()->get();
          if (core::has_control_bytes(d, /*keep_newline_tab=*/true)) report(v.source(), "description", d);
          continue;
        }
        self(self, v, false);
      }
    } else if (const toml::array* a = n.as_array()) {
      for (const toml::node& e : *a) self(self, e, false);
    } else if (const auto* s = n.as_string()) {
      if (bad(s->get())) report(n.source(), "string", s->get());
    }
  };
  walk(walk, root, true);
  return found;
}

}  // namespace normgate::kernels::detail
