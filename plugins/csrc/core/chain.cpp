// Chain / reduce attribute parsing: the native twin of fusedops.catalog.parse_chain / parse_reduce (same grammar,
// names, aliases, defaults and rejections; tests/test_core_native.py runs both over the same good and bad texts).
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fusedops/fusedops.h"

namespace {

struct StepInfo {
  const char* name;
  int32_t op;
  bool binary;
  int num_defaults;
  float defaults[2];
};

// Order and defaults as fusedops.catalog.STEP_KINDS.
const StepInfo kSteps[] = {
    {"add", FUSEDOPS_STEP_ADD, true, 0, {0, 0}},
    {"sub", FUSEDOPS_STEP_SUB, true, 0, {0, 0}},
    {"mul", FUSEDOPS_STEP_MUL, true, 0, {0, 0}},
    {"div", FUSEDOPS_STEP_DIV, true, 0, {0, 0}},
    {"rsub", FUSEDOPS_STEP_RSUB, true, 0, {0, 0}},
    {"rdiv", FUSEDOPS_STEP_RDIV, true, 0, {0, 0}},
    {"relu", FUSEDOPS_STEP_RELU, false, 0, {0, 0}},
    {"leaky_relu", FUSEDOPS_STEP_LEAKY_RELU, false, 1, {0.01f, 0}},
    {"sigmoid", FUSEDOPS_STEP_SIGMOID, false, 0, {0, 0}},
    {"silu", FUSEDOPS_STEP_SILU, false, 0, {0, 0}},
    {"tanh", FUSEDOPS_STEP_TANH, false, 0, {0, 0}},
    {"hardtanh", FUSEDOPS_STEP_HARDTANH, false, 2, {-1.0f, 1.0f}},
    {"hardsigmoid", FUSEDOPS_STEP_HARDSIGMOID, false, 2, {static_cast<float>(1.0 / 6.0), 0.5f}},
    {"hardswish", FUSEDOPS_STEP_HARDSWISH, false, 0, {0, 0}},
    {"mish", FUSEDOPS_STEP_MISH, false, 0, {0, 0}},
    {"softplus", FUSEDOPS_STEP_SOFTPLUS, false, 2, {1.0f, 20.0f}},
    {"gelu", FUSEDOPS_STEP_GELU, false, 0, {0, 0}},
    {"gelu_tanh", FUSEDOPS_STEP_GELU_TANH, false, 0, {0, 0}},
};

const StepInfo* find_step(const std::string& name) {
  std::string n = name == "swish" ? "silu" : name == "clip" ? "hardtanh" : name;  // STEP_ALIASES
  for (const auto& s : kSteps)
    if (n == s.name) return &s;
  return nullptr;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The catalog's number regex: [+-]?(inf | (\d+\.?\d* | \.\d+)([eE][+-]?\d+)?)
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

void set_err(char* err, size_t err_len, const char* fmt, ...) {
  if (!err || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

bool parse_float(const std::string& a, float* out) {
  if (!number_syntax_ok(a)) return false;
  errno = 0;
  const double v = std::strtod(a.c_str(), nullptr);  // "inf", overflow -> ±inf, like Python's float()
  *out = static_cast<float>(v);                      // chains run in float32
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
  const std::string full = strip(text ? std::string(text) : std::string());
  if (full.empty()) return FUSEDOPS_OK;
  std::vector<fusedops_step> steps;
  size_t pos = 0;
  while (true) {
    const size_t semi = full.find(';', pos);
    const std::string raw = full.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
    const std::string st = strip(raw);
    // step := name [ "(" args ")" ], name = [a-z_]+, optional spaces between name and "(".
    size_t i = 0;
    while (i < st.size() && ((st[i] >= 'a' && st[i] <= 'z') || st[i] == '_')) ++i;
    const std::string name = st.substr(0, i);
    size_t j = i;
    while (j < st.size() && is_space(st[j])) ++j;
    bool has_args = false, ok = !name.empty();
    std::string argtext;
    if (ok && j < st.size()) {
      if (st[j] == '(' && st.back() == ')' && st.size() - 1 > j) {
        has_args = true;
        argtext = st.substr(j + 1, st.size() - j - 2);
        if (argtext.find('\n') != std::string::npos) ok = false;  // the catalog's regex '.' stops at newlines
      } else {
        ok = false;
      }
    }
    if (!ok) {
      set_err(err, err_len, "malformed chain step '%s' in '%s'", st.c_str(), full.c_str());
      return FUSEDOPS_ERR_INVALID_ARGUMENT;
    }
    const StepInfo* info = find_step(name);
    if (!info) {
      set_err(err, err_len,
              "unknown chain step '%s' in '%s'; known: add, sub, mul, div, rsub, rdiv, relu, leaky_relu, sigmoid, "
              "silu, tanh, hardtanh, hardsigmoid, hardswish, mish, softplus, gelu, gelu_tanh",
              name.c_str(), full.c_str());
      return FUSEDOPS_ERR_INVALID_ARGUMENT;
    }
    std::vector<std::string> args;
    if (has_args) {
      size_t p = 0;
      while (true) {
        const size_t c = argtext.find(',', p);
        args.push_back(strip(argtext.substr(p, c == std::string::npos ? std::string::npos : c - p)));
        if (c == std::string::npos) break;
        p = c + 1;
      }
      if (args.size() == 1 && args[0].empty()) args.clear();
    }
    fusedops_step s{};
    s.op = info->op;
    s.operand = -1;
    if (info->binary) {
      if (args.size() != 1) {
        set_err(err, err_len, "step '%s' takes exactly one operand (a number or @k), got %zu", info->name,
                args.size());
        return FUSEDOPS_ERR_INVALID_ARGUMENT;
      }
      const std::string& a = args[0];
      if (!a.empty() && a[0] == '@') {
        bool digits = a.size() > 1;
        for (size_t k = 1; k < a.size(); ++k) digits = digits && is_digit(a[k]);
        if (!digits) {
          set_err(err, err_len, "bad extra-input reference '%s' in step '%s'", a.c_str(), info->name);
          return FUSEDOPS_ERR_INVALID_ARGUMENT;
        }
        // Any run of digits: values beyond int range are out of range anyway.
        size_t first = 1;
        while (first + 1 < a.size() && a[first] == '0') ++first;
        const long k = a.size() - first > 6 ? 1000000L : std::strtol(a.c_str() + first, nullptr, 10);
        if (k >= FUSEDOPS_MAX_EXTRAS) {
          set_err(err, err_len, "extra input %s out of range in step '%s' (at most %d extras)", a.c_str(),
                  info->name, FUSEDOPS_MAX_EXTRAS);
          return FUSEDOPS_ERR_INVALID_ARGUMENT;
        }
        s.operand = static_cast<int32_t>(k);
      } else if (!parse_float(a, &s.a)) {
        set_err(err, err_len, "malformed number '%s' in step '%s'", a.c_str(), info->name);
        return FUSEDOPS_ERR_INVALID_ARGUMENT;
      }
    } else {
      if (static_cast<int>(args.size()) > info->num_defaults) {
        set_err(err, err_len, "step '%s' takes at most %d parameter(s), got %zu", info->name, info->num_defaults,
                args.size());
        return FUSEDOPS_ERR_INVALID_ARGUMENT;
      }
      float params[2] = {info->defaults[0], info->defaults[1]};
      for (size_t k = 0; k < args.size(); ++k) {
        if (!parse_float(args[k], &params[k])) {
          set_err(err, err_len, "malformed number '%s' in step '%s'", args[k].c_str(), info->name);
          return FUSEDOPS_ERR_INVALID_ARGUMENT;
        }
      }
      s.a = params[0];
      s.b = params[1];
    }
    steps.push_back(s);
    if (semi == std::string::npos) break;
    pos = semi + 1;
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
  const std::string t = strip(text ? std::string(text) : std::string());
  static const char* names[] = {"", "min", "max", "sum", "mean", "logsumexp"};
  for (int32_t k = 0; k < 6; ++k) {
    if (t == names[k]) {
      *out = k;
      return FUSEDOPS_OK;
    }
  }
  set_err(err, err_len, "unknown reduce '%s'; expected one of '', 'min', 'max', 'sum', 'mean', 'logsumexp'",
          t.c_str());
  return FUSEDOPS_ERR_INVALID_ARGUMENT;
}

FUSEDOPS_API int32_t fusedops_num_extras(const fusedops_chain* pre, const fusedops_chain* post) {
  int32_t n = 0;
  for (const fusedops_chain* c : {pre, post}) {
    if (!c) continue;
    for (int32_t i = 0; i < c->num_steps && i < FUSEDOPS_MAX_STEPS; ++i)
      if (c->steps[i].op >= FUSEDOPS_STEP_ADD && c->steps[i].op <= FUSEDOPS_STEP_RDIV && c->steps[i].operand >= 0 &&
          c->steps[i].operand + 1 > n)
        n = c->steps[i].operand + 1;
  }
  return n;
}

}  // extern "C"
