// normgate/core/printable.h: user-supplied text (paths, names, messages) as
// it may appear in a line of terminal output or of a report, so that no
// control byte starts a new line, moves the cursor or hides text.
#pragma once

#include <string>
#include <string_view>

namespace normgate::core {

/// `text` with every control byte (0x00-0x1f, 0x7f) written as \xHH, so
/// that it stays on one line of a table or a message; newline and tab too,
/// unless `keep_newline_tab`. Bytes >= 0x80 (UTF-8) are kept. Never throws
/// but std::bad_alloc.
std::string escape_controls(std::string_view text, bool keep_newline_tab = false);

}  // namespace normgate::core
