// Error messages of the C ABI: formatted into the caller's buffer, cut (when too long) only at a UTF-8 character
// boundary, so a caller that decodes the message never sees half a character.
#pragma once

#include <cstdarg>
#include <cstddef>

namespace fusedops {
namespace core {

// Writes the formatted message into err (when err != nullptr and err_len > 0) and returns code.
int set_message(char* err, size_t err_len, int code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
int vset_message(char* err, size_t err_len, int code, const char* fmt, va_list ap);

}  // namespace core
}  // namespace fusedops
