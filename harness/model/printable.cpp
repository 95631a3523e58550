#include "harness/model/printable.hpp"

#include <cstdio>

namespace attnbench {

std::string printable(const std::string& s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  char buf[8];
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n' && keep_newlines) {
      out += '\n';
    } else if (c < 0x20 || c == 0x7f) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case 0x1b: out += "\\e"; break;
        default:
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
      }
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
      out += buf;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace attnbench
