#include "core/messages.h"

#include <cstdio>

namespace fusedops {
namespace core {

namespace {
// Length of the UTF-8 sequence a lead byte starts (1 for ASCII and for stray bytes).
size_t sequence_length(unsigned char c) {
  if (c >= 0xF0 && c <= 0xF7) return 4;
  if (c >= 0xE0) return 3;
  if (c >= 0xC0) return 2;
  return 1;
}
}  // namespace

int vset_message(char* err, size_t err_len, int code, const char* fmt, va_list ap) {
  if (!err || err_len == 0) return code;
  const int n = std::vsnprintf(err, err_len, fmt, ap);
  if (n < 0 || static_cast<size_t>(n) < err_len) return code;
  // Truncated: drop a trailing, incomplete UTF-8 sequence.
  size_t end = err_len - 1;  // err[end] is the terminating NUL
  size_t lead = end;
  while (lead > 0 && (static_cast<unsigned char>(err[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead > 0) {
    const size_t start = lead - 1;
    if (start + sequence_length(static_cast<unsigned char>(err[start])) > end) err[start] = '\0';
  }
  return code;
}

int set_message(char* err, size_t err_len, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_message(err, err_len, code, fmt, ap);
  va_end(ap);
  return code;
}

}  // namespace core
}  // namespace fusedops
