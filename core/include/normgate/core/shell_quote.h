// normgate/core/shell_quote.h: a value as one word a POSIX shell (bash, zsh,
// dash for the plain form) reads back unchanged, for the commands normgate
// prints for a user to paste (repro's replay line).
#pragma once

#include <string>
#include <string_view>

namespace normgate::core {

/// `text` as one shell word that reads back as `text`: 'text' (a ' inside
/// as '\''), or, when text holds a control byte (newline, tab, ESC, DEL,
/// ...), ANSI-C quoting $'...' (bash, zsh, ksh; POSIX since 2024) with \n,
/// \t, \\, \' and \xHH escapes, so that the printed line stays one line and
/// shows no raw control byte. Bytes >= 0x80 (UTF-8) are kept. Never throws
/// but std::bad_alloc.
std::string shell_quote(std::string_view text);

/// `text` itself when it is a non-empty run of bytes no shell treats
/// specially (letters, digits and _ - . / , : = + @ %), so that a printed
/// command keeps its plain paths readable; shell_quote(text) otherwise.
/// Never throws but std::bad_alloc.
std::string shell_word(std::string_view text);

}  // namespace normgate::core
