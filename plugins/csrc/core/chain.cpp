// Chain / reduce attribute parsing: the native twin of fusedops.catalog.parse_chain / parse_reduce. Same grammar
// (ASCII only, at most kMaxChainBytes bytes), same names, aliases, defaults, value checks and the same message text
// byte for byte; tests/test_hostile_chain.py runs both over one corpus and a differential fuzz, and
// scripts/fuzz_native.sh fuzzes this file under ASan + UBSan. Linear time: one pass to check the bytes, one split on
// ';' and ',' (no backtracking).
#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <locale.h>
#include <string>
#include <vector>

#include "core/message.h"
#include "fusedops/fusedops.h"

using fusedops::core::quote;
using fusedops::core::set_err;

namespace {

constexpr size_t kMaxChainBytes = FUSEDOPS_MAX_CHAIN_BYTES;  // fusedops.catalog.MAX_CHAIN_BYTES

struct StepInfo {
  const char* name;
  int32_t op;
  bool binary;
  int num_defaults;
  float defaults[2];
  const char* param_names[2];
  int param_flags[2];  // FUSEDOPS_PARAM_ALLOW_INF | FUSEDOPS_PARAM_NONZERO
  bool ordered;        // parameter a <= parameter b
};

// The op spec's steps (fusedops_spec.h), in the order of fusedops.catalog.STEP_KINDS.
const StepInfo kSteps[] = {
#define FUSEDOPS_STEP_INFO(E, NAME, CODE, BINARY, NP, DA, NA, FA, DB, NB, FB, ORDERED) \
  {NAME, FUSEDOPS_STEP_##E, BINARY != 0, NP, {DA, DB}, {NA, NB}, {FA, FB}, ORDERED != 0},
    FUSEDOPS_STEPS(FUSEDOPS_STEP_INFO)
#undef FUSEDOPS_STEP_INFO
};

const StepInfo* find_step(const std::string& name) {
  int32_t op = 0;
#define FUSEDOPS_STEP_ALIAS(ALIAS, E) \
  if (name == ALIAS) op = FUSEDOPS_STEP_##E;
  FUSEDOPS_STEP_ALIASES(FUSEDOPS_STEP_ALIAS)
#undef FUSEDOPS_STEP_ALIAS
  for (const auto& s : kSteps)
    if (op ? s.op == op : name == s.name) return &s;
  return nullptr;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// The text as a std::string after the length and byte checks of fusedops.catalog._ascii_text; false (and the
// message) when it fails them.
bool ascii_text(const char* text, const char* what, std::string* out, char* err, size_t err_len) {
  const size_t n = text ? strnlen(text, kMaxChainBytes + 1) : 0;
  if (n > kMaxChainBytes) {
    set_err(err, err_len, "%s is longer than %zu bytes", what, kMaxChainBytes);
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b >= 0x80) {
      set_err(err, err_len, "%s has a non-ASCII byte 0x%02x at offset %zu (only ASCII is accepted)", what, b, i);
      return false;
    }
    if ((b < 0x20 || b == 0x7F) && !is_space(static_cast<char>(b))) {
      set_err(err, err_len, "%s has a control character 0x%02x at offset %zu", what, b, i);
      return false;
    }
  }
  out->assign(text ? text : "", n);
  return true;
}

// The catalog's number syntax: [+-]? ( "inf" | ( digit+ [ "." digit* ] | "." digit+ ) [ [eE] [+-]? digit+ ] )
bool number_syntax_ok(const std::string& a) {
  size_t i = 0, n = a.size();
  if (i < n && (a[i] == '+' || a[i] == '-')) ++i;
  if (a.compare(i, std::string::npos, "inf") == 0) return true;
  size_t int_digits = 0, frac_digits = 0;
  while (i < n && is_digit(a[i])) ++i, ++int_digits;
  if (i < n && a[i] == '.') {
    ++i;
    while (i < n && is_digit(a[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < n && (a[i] == 'e' || a[i] == 'E')) {
    ++i;
    if (i < n && (a[i] == '+' || a[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < n && is_digit(a[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == n;
}

// strtod in the "C" locale whatever the host application set (a host in a locale with a decimal comma would
// otherwise read "0.5" as 0).
double c_strtod(const std::string& a) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  return c_locale ? strtod_l(a.c_str(), nullptr, c_locale) : std::strtod(a.c_str(), nullptr);
}

// A number token as the float32 the runtimes use; false (and the catalog's message) when malformed or when a
// finite literal rounds to infinity.
bool parse_float(const std::string& a, const char* step, float* out, char* err, size_t err_len) {
  if (!number_syntax_ok(a)) {
    set_err(err, err_len, "malformed number %s in step '%s'", quote(a).c_str(), step);
    return false;
  }
  const float v = static_cast<float>(c_strtod(a));  // double first, then float32, like Python's float() + struct
  const size_t sign = (a[0] == '+' || a[0] == '-') ? 1 : 0;
  if (std::isinf(v) && a.compare(sign, std::string::npos, "inf") != 0) {
    set_err(err, err_len, "number %s in step '%s' is out of float32 range (write inf)", quote(a).c_str(), step);
    return false;
  }
  *out = v;
  return true;
}

// fusedops.catalog._float_text: the shortest %g text (6..9 digits) that reads back as the same float32.
std::string float_text(float v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (static_cast<float>(c_strtod(buf)) == v) return buf;
  }
  return buf;
}

// fusedops.catalog._check_params: the order rule first (its bounds may be infinite), then finiteness, then
// non-zero parameters.
bool params_ok(const StepInfo& info, const float p[2], char* err, size_t err_len) {
  if (info.ordered && p[0] > p[1]) {
    set_err(err, err_len, "step '%s' needs %s <= %s, got %s=%s and %s=%s", info.name, info.param_names[0],
            info.param_names[1], info.param_names[0], float_text(p[0]).c_str(), info.param_names[1],
            float_text(p[1]).c_str());
    return false;
  }
  for (int k = 0; k < info.num_defaults; ++k) {
    if (!(info.param_flags[k] & FUSEDOPS_PARAM_ALLOW_INF) && std::isinf(p[k])) {
      set_err(err, err_len, "parameters of step '%s' must be finite", info.name);
      return false;
    }
  }
  for (int k = 0; k < info.num_defaults; ++k) {
    if ((info.param_flags[k] & FUSEDOPS_PARAM_NONZERO) && p[k] == 0.f) {
      set_err(err, err_len, "step '%s' needs %s != 0", info.name, info.param_names[k]);
      return false;
    }
  }
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(sep, pos);
    parts.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) return parts;
    pos = at + 1;
  }
}

// One step of the chain `full`; false (and the message) when it is not a valid step.
bool parse_step(const std::string& raw, const std::string& full, fusedops_step* s, char* err, size_t err_len) {
  const std::string st = strip(raw);
  size_t i = 0;
  while (i < st.size() && is_name_char(st[i])) ++i;
  const std::string name = st.substr(0, i);
  size_t j = i;
  while (j < st.size() && is_space(st[j])) ++j;
  std::vector<std::string> args;
  bool ok = !name.empty();
  if (ok && j < st.size()) {
    const std::string inner = st.size() - 1 > j ? st.substr(j + 1, st.size() - j - 2) : std::string();
    ok = st[j] == '(' && st.back() == ')' && st.size() - 1 > j && inner.find_first_of("()") == std::string::npos;
    if (ok) {
      for (const std::string& a : split(inner, ',')) args.push_back(strip(a));
      if (args.size() == 1 && args[0].empty()) args.clear();
    }
  }
  if (!ok) {
    set_err(err, err_len, "malformed chain step %s in %s", quote(st).c_str(), quote(full).c_str());
    return false;
  }
  const StepInfo* info = find_step(name);
  if (!info) {
    set_err(err, err_len, "unknown chain step %s in %s; known: " FUSEDOPS_STEP_NAMES_TEXT, quote(name).c_str(),
            quote(full).c_str());
    return false;
  }
  *s = fusedops_step{};
  s->op = info->op;
  s->operand = -1;
  if (info->binary) {
    if (args.size() != 1) {
      set_err(err, err_len, "step '%s' takes exactly one operand (a number or @k), got %zu", info->name,
              args.size());
      return false;
    }
    const std::string& a = args[0];
    if (!a.empty() && a[0] == '@') {
      bool digits = a.size() > 1;
      for (size_t k = 1; k < a.size(); ++k) digits = digits && is_digit(a[k]);
      if (!digits) {
        set_err(err, err_len, "bad extra-input reference %s in step '%s'", quote(a).c_str(), info->name);
        return false;
      }
      size_t first = 1;
      while (first + 1 < a.size() && a[first] == '0') ++first;  // leading zeros; longer runs are out of range
      const long k = a.size() - first > 9 ? FUSEDOPS_MAX_EXTRAS : std::strtol(a.c_str() + first, nullptr, 10);
      if (k >= FUSEDOPS_MAX_EXTRAS) {
        set_err(err, err_len, "extra input %s out of range in step '%s' (at most %d extras, @0..@%d)",
                quote(a).c_str(), info->name, FUSEDOPS_MAX_EXTRAS, FUSEDOPS_MAX_EXTRAS - 1);
        return false;
      }
      s->operand = static_cast<int32_t>(k);
      return true;
    }
    return parse_float(a, info->name, &s->a, err, err_len);
  }
  if (static_cast<int>(args.size()) > info->num_defaults) {
    set_err(err, err_len, "step '%s' takes at most %d parameter(s), got %zu", info->name, info->num_defaults,
            args.size());
    return false;
  }
  float params[2] = {info->defaults[0], info->defaults[1]};
  for (size_t k = 0; k < args.size(); ++k)
    if (!parse_float(args[k], info->name, &params[k], err, err_len)) return false;
  if (!params_ok(*info, params, err, err_len)) return false;
  s->a = params[0];
  s->b = params[1];
  return true;
}

}  // namespace

extern "C" {

FUSEDOPS_API const char* fusedops_version(void) { return "0.1.0"; }

FUSEDOPS_API int fusedops_parse_chain(const char* text, fusedops_chain* out, char* err, size_t err_len) {
  if (!out) {
    set_err(err, err_len, "fusedops_parse_chain: out is NULL");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  out->num_steps = 0;
  std::string checked;
  if (!ascii_text(text, "chain text", &checked, err, err_len)) return FUSEDOPS_ERR_INVALID_ARGUMENT;
  const std::string full = strip(checked);
  if (full.empty()) return FUSEDOPS_OK;
  std::vector<fusedops_step> steps;
  for (const std::string& raw : split(full, ';')) {
    fusedops_step s;
    if (!parse_step(raw, full, &s, err, err_len)) return FUSEDOPS_ERR_INVALID_ARGUMENT;
    steps.push_back(s);
  }
  if (steps.size() > FUSEDOPS_MAX_STEPS) {
    set_err(err, err_len, "chain has %zu steps; at most %d are supported", steps.size(), FUSEDOPS_MAX_STEPS);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  out->num_steps = static_cast<int32_t>(steps.size());
  for (size_t k = 0; k < steps.size(); ++k) out->steps[k] = steps[k];
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_parse_reduce(const char* text, int32_t* out, char* err, size_t err_len) {
  if (!out) {
    set_err(err, err_len, "fusedops_parse_reduce: out is NULL");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  std::string checked;
  if (!ascii_text(text, "reduce", &checked, err, err_len)) return FUSEDOPS_ERR_INVALID_ARGUMENT;
  const std::string t = strip(checked);
#define FUSEDOPS_REDUCE_MATCH(E, TEXT)  \
  if (t == TEXT) {                     \
    *out = FUSEDOPS_REDUCE_##E;        \
    return FUSEDOPS_OK;                \
  }
  FUSEDOPS_REDUCES(FUSEDOPS_REDUCE_MATCH)
#undef FUSEDOPS_REDUCE_MATCH
  set_err(err, err_len, "unknown reduce %s; expected one of " FUSEDOPS_REDUCE_NAMES_TEXT, quote(t).c_str());
  return FUSEDOPS_ERR_INVALID_ARGUMENT;
}

FUSEDOPS_API int32_t fusedops_num_extras(const fusedops_chain* pre, const fusedops_chain* post) {
  // int64: a corrupt operand of INT32_MAX must not overflow (found by scripts/fuzz_native.sh); such a chain fails
  // the descriptor check anyway.
  int64_t n = 0;
  for (const fusedops_chain* c : {pre, post}) {
    if (!c) continue;
    for (int32_t i = 0; i < c->num_steps && i < FUSEDOPS_MAX_STEPS; ++i)
      if (fusedops_step_is_binary(c->steps[i].op) && c->steps[i].operand >= 0 &&
          static_cast<int64_t>(c->steps[i].operand) + 1 > n)
        n = static_cast<int64_t>(c->steps[i].operand) + 1;
  }
  return n > INT32_MAX ? INT32_MAX : static_cast<int32_t>(n);
}

}  // extern "C"
