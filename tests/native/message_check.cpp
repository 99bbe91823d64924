// Checks core/message.h: set_err never leaves a cut UTF-8 sequence at the end of a truncated message, and quote()
// escapes and shortens like fusedops.catalog.quote. Built and run by tests/test_hostile_native.py; prints one line
// per failure and exits non-zero on any.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/message.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL %s\n", what.c_str());
    ++failures;
  }
}

// Strict UTF-8 validity (no truncated, overlong-free check is not needed here: inputs are valid).
bool valid_utf8(const char* s) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s);
  while (*p) {
    const size_t n = fusedops::core::utf8_sequence_length(*p);
    if (*p >= 0x80 && n == 1) return false;
    for (size_t k = 1; k < n; ++k)
      if ((p[k] & 0xC0) != 0x80) return false;
    p += n;
  }
  return true;
}

}  // namespace

int main() {
  // 1-, 2-, 3- and 4-byte characters mixed; every buffer size from 1 to past the end.
  const std::string text = "a\xC3\xA9" "b\xE2\x82\xAC" "c\xF0\x9F\x98\x80" "d\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  for (size_t len = 1; len <= text.size() + 2; ++len) {
    char buf[64];
    std::memset(buf, 'Z', sizeof buf);
    fusedops::core::set_err(buf, len, "%s", text.c_str());
    const size_t got = std::strlen(buf);
    expect(got < len, "terminated within the buffer at len " + std::to_string(len));
    expect(valid_utf8(buf), "valid UTF-8 at len " + std::to_string(len));
    expect(text.compare(0, got, buf) == 0, "a prefix at len " + std::to_string(len));
    expect(got + 4 > len - 1 || got == text.size(), "cut at most one character short at len " + std::to_string(len));
  }
  fusedops::core::set_err(nullptr, 10, "%s", "ignored");  // no buffer: no write, no crash
  char one[1] = {'Z'};
  fusedops::core::set_err(one, 1, "%s", text.c_str());
  expect(one[0] == '\0', "a 1-byte buffer holds the empty message");

  using fusedops::core::quote;
  expect(quote("relu") == "'relu'", "plain");
  expect(quote("a'b\\c") == "'a\\'b\\\\c'", "quote and backslash escaped");
  expect(quote("x\ny\tz\r") == "'x\\ny\\tz\\r'", "newline, tab, carriage return spelled out");
  expect(quote(std::string("\x01\x7f\xc3\xa9", 4)) == "'\\x01\\x7f\\xc3\\xa9'", "other bytes as \\xHH");
  expect(quote(std::string(100, 'q')) == "'" + std::string(80, 'q') + "...'", "shortened to 80 bytes");
  if (failures == 0) std::printf("ok\n");
  return failures ? 1 : 0;
}
