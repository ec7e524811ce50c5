// normgate/core/printable.h: user-supplied text (paths, names, messages) as
// it may appear in a line of terminal output or of a report, so that no
// control byte starts a new line, moves the cursor or hides text.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace normgate::core {

/// `text` with every character that could start a line, move the cursor or
/// reorder what a reader sees written out in ASCII, so that it stays on one
/// line of a table or a message:
///  - C0 control bytes (0x00-0x1f) and DEL (0x7f) as \xHH (newline and tab
///    kept when `keep_newline_tab`);
///  - the C1 controls U+0080-U+009F (NEL, CSI, ...), the line and paragraph
///    separators U+2028 and U+2029 and the bidirectional embeddings,
///    overrides and isolates U+202A-U+202E and U+2066-U+2069 as \uXXXX
///    (Unicode 15.1, chapter 5.8 "Newline Guidelines" and UAX #9: a reader
///    that splits lines on them, or a terminal that honours them, would
///    otherwise show a line or an order normgate did not write).
/// Other bytes >= 0x80 (UTF-8, valid or not) are kept. Never throws but
/// std::bad_alloc.
std::string escape_controls(std::string_view text, bool keep_newline_tab = false);

/// `text` with every byte that is not part of a well-formed UTF-8 sequence
/// (Unicode 15.1, chapter 3.9, table 3-7: no overlong forms, no surrogates,
/// nothing above U+10FFFF, no truncated sequence) written as \xHH, so that
/// text from outside (a plugin's or an external kernel's error message) is
/// the same valid UTF-8 on stdout, in the Markdown report and in the JSON
/// journal (whose writer would otherwise put U+FFFD where the others print
/// the raw bytes). Well-formed text is returned as it is; a backslash is
/// kept as it is. Never throws but std::bad_alloc.
std::string escape_invalid_utf8(std::string_view text);

/// True when `text` holds a byte escape_controls writes as \xHH: a C0
/// control (0x00-0x1f) or DEL (0x7f), newline and tab excepted when
/// `keep_newline_tab`. Never throws.
bool has_control_bytes(std::string_view text, bool keep_newline_tab = false) noexcept;

/// An error message made of lines: a first line, then lines of its own (a
/// list, a table of differences), each begun by "\n". The thrower writes
/// every value it quotes through escape_controls, so the message's only
/// newlines are its own; normgate's main prints them as line breaks. The
/// message of any other exception is printed as one line, its newlines as
/// \x0a, since it may quote a value from a file or the command line.
class MultilineError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace normgate::core
