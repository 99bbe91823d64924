// Error messages of the native core: printf-style into the caller's buffer, never cut inside a UTF-8 character,
// and user text echoed quoted, escaped and shortened exactly as fusedops.catalog.quote does (one line, ASCII).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <string>

namespace fusedops {
namespace core {

// Number of bytes a UTF-8 sequence starting with `lead` occupies (1 for ASCII and for bytes that cannot lead).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Length <= `len` at which `s` (of length `len`) can be cut without splitting a UTF-8 sequence at its end.
inline size_t utf8_safe_cut(const char* s, size_t len) {
  size_t lead = len;
  // Walk back over at most 3 continuation bytes (10xxxxxx) to the start of the last sequence.
  while (lead > 0 && len - lead < 4 && (static_cast<unsigned char>(s[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return len;
  const unsigned char first = static_cast<unsigned char>(s[lead - 1]);
  if (first < 0xC0) return len;  // ASCII (or a stray continuation run): nothing to protect
  return utf8_sequence_length(first) > len - (lead - 1) ? lead - 1 : len;
}

inline void vset_err(char* err, size_t err_len, const char* fmt, va_list ap) {
  if (!err || err_len == 0) return;
  const int n = std::vsnprintf(err, err_len, fmt, ap);
  if (n < 0) {
    err[0] = '\0';
    return;
  }
  if (static_cast<size_t>(n) >= err_len) err[utf8_safe_cut(err, err_len - 1)] = '\0';  // truncated
}

inline void set_err(char* err, size_t err_len, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_err(err, err_len, fmt, ap);
  va_end(ap);
}

// set_err that returns `code`: `return set_message(err, err_len, FUSEDOPS_ERR_..., "...", ...);`
inline int set_message(char* err, size_t err_len, int code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
inline int set_message(char* err, size_t err_len, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_err(err, err_len, fmt, ap);
  va_end(ap);
  return code;
}

// 'text' single-quoted: \ and ' escaped, \n \t \r spelled out, other bytes outside printable ASCII as \xHH, at most
// `limit` bytes of the text shown (then "..." before the closing quote).
inline std::string quote(const std::string& text, size_t limit = 80) {
  std::string out = "'";
  const size_t n = text.size() < limit ? text.size() : limit;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  out += text.size() > limit ? "...'" : "'";
  return out;
}

}  // namespace core
}  // namespace fusedops
