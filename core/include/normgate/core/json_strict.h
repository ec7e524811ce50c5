// normgate/core/json_strict.h: parse the JSON of normgate's sealed records
// (approvals, rejections) with two rules nlohmann::json::parse does not keep.
// Header-only; needs nlohmann/json (normgate_core links it).
#pragma once

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/core/printable.h"

namespace normgate {

/// Nesting normgate's own files never exceed: a record is an object of
/// objects and arrays a few levels deep.
constexpr int kJsonMaxDepth = 64;

/// Parse `text` as JSON with three more rules, all refused before the caller
/// sees the value:
///  - at most `max_depth` nested arrays and objects (nlohmann::json's dump
///    and destructor recurse once a level, so a few hundred kilobytes of
///    brackets overflow the stack: a crash, not an error);
///  - no key twice in one object (nlohmann keeps the last one; a record's
///    seal covers the object as parsed, so a second key could change the
///    file's bytes, and what a first-wins reader sees, unnoticed);
///  - no control character (JSON's escapes \n, \u001b, ... write them) in a
///    key: normgate writes none, and one quoted in an error message could
///    start a line that reads as normgate's own. (String values are checked
///    by the record's reader, which names the record; a record's INVALID
///    reason is printed as one line.)
/// Throws nlohmann::json::parse_error for text that is not JSON, and
/// std::invalid_argument naming the rule (and the key, escaped) for the
/// three above.
inline nlohmann::json parse_json_strict(std::string_view text, int max_depth = kJsonMaxDepth) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  const nlohmann::json::parser_callback_t cb = [&](int depth, Event ev, nlohmann::json& parsed) {
    switch (ev) {
      case Event::object_start:
      case Event::array_start:
        // depth counts the containers already open around this one.
        if (depth >= max_depth)
          throw std::invalid_argument("JSON nested deeper than " + std::to_string(max_depth) + " levels");
        if (ev == Event::object_start) keys.emplace_back();
        break;
      case Event::key:
        if (core::has_control_bytes(parsed.get_ref<const std::string&>()))
          throw std::invalid_argument("JSON key '" + core::escape_controls(parsed.get_ref<const std::string&>()) +
                                      "' holds a control character");
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw std::invalid_argument("JSON object has the key '" + parsed.get<std::string>() + "' twice");
        break;
      case Event::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  return nlohmann::json::parse(text, cb);
}

}  // namespace normgate
