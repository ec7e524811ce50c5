// normgate/core/doc_format.h: the "format" field naming the kind and version
// of every JSON document normgate writes: "NAME/MAJOR", e.g.
// "normgate-gate-report/1" (docs/schemas.md lists them, field by field).
//
// Versioning: within one major version fields are only added (readers ignore
// fields they do not know); removing a field or changing its meaning makes a
// new major version, which older readers refuse.
#pragma once

#include <charconv>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace normgate {

/// Checks the "format" of `doc` against the kinds `names` (e.g.
/// {"normgate-gate-report", "normgate-check-report"}) and the newest major
/// version the reader knows, `major` (>= 1). On success returns "" and stores
/// the document's major version in *version (0: an object without "format",
/// written before normgate versioned its documents, accepted only when
/// legacy_ok). Otherwise returns why not, one clause without the file name:
/// the field is not a string "NAME/MAJOR", NAME is another kind, MAJOR is
/// newer than `major` (or 0), or the field is missing and !legacy_ok.
/// Never throws.
inline std::string check_doc_format(const nlohmann::json& doc, std::initializer_list<std::string_view> names,
                                    int major, bool legacy_ok, int* version) {
  std::string kinds;
  for (auto n : names) kinds += (kinds.empty() ? "" : " or ") + std::string(n) + "/" + std::to_string(major);
  if (!doc.is_object() || !doc.contains("format")) {
    if (legacy_ok && doc.is_object()) {
      *version = 0;
      return "";
    }
    return "no \"format\" field (expected " + kinds + ")";
  }
  const auto& f = doc["format"];
  if (!f.is_string()) return "\"format\" is " + f.dump() + ", not a string (expected " + kinds + ")";
  const std::string s = f.get<std::string>();
  const size_t slash = s.rfind('/');
  int m = -1;
  if (slash != std::string::npos && slash + 1 < s.size()) {
    const char* b = s.data() + slash + 1;
    const char* e = s.data() + s.size();
    const auto r = std::from_chars(b, e, m);
    if (r.ec != std::errc() || r.ptr != e) m = -1;
  }
  if (m < 0) return "format \"" + s + "\" is not NAME/MAJOR (expected " + kinds + ")";
  const std::string_view name(s.data(), slash);
  bool known = false;
  for (auto n : names) known = known || n == name;
  if (!known) return "format \"" + s + "\" is another kind of document (expected " + kinds + ")";
  if (m < 1 || m > major)
    return "format \"" + s + "\": major version " + std::to_string(m) + " is unknown to this normgate, which reads " +
           kinds + (m > major ? " (written by a newer normgate: use that one)" : "");
  *version = m;
  return "";
}

}  // namespace normgate
