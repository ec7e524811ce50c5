// normgate/core/printable.h
#include "normgate/core/printable.h"

#include <cstdio>

namespace normgate::core {

namespace {

// The code point of the well-formed UTF-8 sequence of 2 or 3 bytes at
// text[i] (its length in *n), or -1 (not one, or a longer one).
long utf8_at(std::string_view text, size_t i, size_t* n) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const auto cont = [&](size_t k) { return i + k < text.size() && (b(k) & 0xC0) == 0x80; };
  if ((b(0) & 0xE0) == 0xC0 && b(0) >= 0xC2 && cont(1)) {
    *n = 2;
    return static_cast<long>(((b(0) & 0x1F) << 6) | (b(1) & 0x3F));
  }
  if ((b(0) & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    const long c = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    if (c < 0x800) return -1;  // overlong
    *n = 3;
    return c;
  }
  return -1;
}

bool escaped_code_point(long c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x2028 || c == 0x2029 || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

}  // namespace

bool has_control_bytes(std::string_view text, bool keep_newline_tab) noexcept {
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && !(keep_newline_tab && (ch == '\n' || ch == '\t'))) || u == 0x7f) return true;
  }
  return false;
}

std::string escape_controls(std::string_view text, bool keep_newline_tab) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && !(keep_newline_tab && (ch == '\n' || ch == '\t'))) || u == 0x7f) {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
      continue;
    }
    if (u >= 0xC2 && u <= 0xE2) {
      size_t n = 0;
      const long c = utf8_at(text, i, &n);
      if (c >= 0 && escaped_code_point(c)) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04lx", c);
        out += b;
        i += n - 1;
        continue;
      }
    }
    out += ch;
  }
  return out;
}

std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  for (size_t i = 0; i < text.size();) {
    const unsigned char b0 = at(i);
    size_t n = 0;  // the well-formed sequence's length at i, 0 if none
    if (b0 < 0x80) {
      n = 1;
    } else {
      // Table 3-7: the second byte's range depends on the first.
      unsigned char lo = 0x80, hi = 0xBF;
      size_t len = 0;
      if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
      else if (b0 == 0xE0) len = 3, lo = 0xA0;
      else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) len = 3;
      else if (b0 == 0xED) len = 3, hi = 0x9F;
      else if (b0 == 0xF0) len = 4, lo = 0x90;
      else if (b0 >= 0xF1 && b0 <= 0xF3) len = 4;
      else if (b0 == 0xF4) len = 4, hi = 0x8F;
      bool ok = len > 0 && i + len <= text.size() && at(i + 1) >= lo && at(i + 1) <= hi;
      for (size_t k = 2; ok && k < len; ++k) ok = at(i + k) >= 0x80 && at(i + k) <= 0xBF;
      if (ok) n = len;
    }
    if (n == 0) {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", b0);
      out += b;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace normgate::core
