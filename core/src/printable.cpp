// normgate/core/printable.h
#include "normgate/core/printable.h"

#include <cstdio>

namespace normgate::core {

std::string escape_controls(std::string_view text, bool keep_newline_tab) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && !(keep_newline_tab && (ch == '\n' || ch == '\t'))) || u == 0x7f) {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace normgate::core
