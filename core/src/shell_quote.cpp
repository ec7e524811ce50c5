// core/src/shell_quote.cpp: shell_quote (shell_quote.h).
#include "normgate/core/shell_quote.h"

#include <cstdio>

namespace normgate::core {

std::string shell_quote(std::string_view text) {
  bool control = false;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    control = control || u < 0x20 || u == 0x7f;
  }
  std::string out;
  out.reserve(text.size() + 4);
  if (!control) {
    out += '\'';
    for (const char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
    return out;
  }
  out += "$'";
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\\') out += "\\\\";
    else if (ch == '\'') out += "\\'";
    else if (u < 0x20 || u == 0x7f) {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else {
      out += ch;
    }
  }
  out += '\'';
  return out;
}

std::string shell_word(std::string_view text) {
  bool plain = !text.empty();
  for (const char ch : text) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                    ch == '-' || ch == '.' || ch == '/' || ch == ',' || ch == ':' || ch == '=' || ch == '+' ||
                    ch == '@' || ch == '%';
    plain = plain && ok;
  }
  return plain ? std::string(text) : shell_quote(text);
}

}  // namespace normgate::core
