// Escaping of strings that came from input (file contents, report fields, a
// worker's messages, command-line values) before they reach a terminal, so that
// an escape sequence, carriage return or backspace in a hostile or careless input
// cannot rewrite, hide or forge what the terminal shows.
#pragma once

#include <string>

namespace attnbench {

/// `s` with every control character escaped: C0 controls (0x00-0x1f) and DEL as
/// \n, \r, \t, \e or \xHH; C1 controls in UTF-8 (U+0080..U+009F, bytes C2 80..C2 9F)
/// as \u0080..\u009f; a backslash stays a backslash. With `keep_newlines`, '\n' is
/// kept (multi-line messages); every other byte is copied unchanged. Never throws
/// (other than std::bad_alloc).
std::string printable(const std::string& s, bool keep_newlines = false);

}  // namespace attnbench
