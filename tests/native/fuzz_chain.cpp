// libFuzzer harness for the native core's attribute parsers and checks, built with ASan + UBSan by
// scripts/fuzz_native.sh. Any crash, sanitizer report or broken invariant (abort) is a finding; the input that
// caused it goes to tests/native/fuzz_regressions/ and into the hostile chain corpus.
//
// Input: byte 0 picks the error-buffer size (and whether the raw bytes are also tried as descriptors); the rest is
// the attribute text (the C API sees it up to the first NUL, as a runtime passing a C string would).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/message.h"
#include "fusedops/fusedops.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = fusedops::core::utf8_sequence_length(c);
    if (c >= 0x80 && n == 1) return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// The message in a buffer of err_len bytes followed by canary bytes: NUL-terminated inside, canaries untouched,
// one line of printable ASCII (user text is escaped by quote()).
void check_message(const std::vector<char>& buf, size_t err_len) {
  if (err_len == 0) return;
  const char* end = static_cast<const char*>(std::memchr(buf.data(), '\0', err_len));
  require(end != nullptr, "message is NUL-terminated within err_len");
  for (size_t k = err_len; k < buf.size(); ++k) require(buf[k] == 'Z', "no write past err_len");
  for (const char* p = buf.data(); p < end; ++p)
    require(*p >= 0x20 && *p < 0x7F, "message is printable ASCII on one line");
}

// The op spec's parameter rules of each step (fusedops_spec.h): flags of parameters a and b, ordered a <= b.
struct ParamRules {
  int32_t op, num_params, flags[2];
  bool ordered;
};
const ParamRules kRules[] = {
#define FUSEDOPS_RULES(E, NAME, CODE, BINARY, NP, DA, NA, FA, DB, NB, FB, ORDERED) \
  {FUSEDOPS_STEP_##E, NP, {FA, FB}, ORDERED != 0},
    FUSEDOPS_STEPS(FUSEDOPS_RULES)
#undef FUSEDOPS_RULES
};

void check_chain(const fusedops_chain& ch) {
  require(ch.num_steps >= 0 && ch.num_steps <= FUSEDOPS_MAX_STEPS, "step count in range");
  for (int32_t i = 0; i < ch.num_steps; ++i) {
    const fusedops_step& s = ch.steps[i];
    require(fusedops_step_is_known(s.op) != 0, "known op code");
    if (fusedops_step_is_binary(s.op)) {
      require(s.operand >= -1 && s.operand < FUSEDOPS_MAX_EXTRAS, "operand in range");
      require(s.operand >= 0 || !std::isnan(s.a), "scalar operand is a number");
    } else {
      require(s.operand == -1, "unary steps have no operand");
      require(!std::isnan(s.a) && !std::isnan(s.b), "parameters are numbers");
      for (const ParamRules& r : kRules) {
        if (r.op != s.op) continue;
        const float p[2] = {s.a, s.b};
        if (r.ordered) require(s.a <= s.b, "ordered parameters: a <= b");
        for (int k = 0; k < r.num_params; ++k) {
          if (!(r.flags[k] & FUSEDOPS_PARAM_ALLOW_INF)) require(std::isfinite(p[k]), "parameter finite");
          if (r.flags[k] & FUSEDOPS_PARAM_NONZERO) require(p[k] != 0.f, "parameter != 0");
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t ctl = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t err_len = static_cast<size_t>(ctl & 0x3F) * 9;  // 0 (no buffer) .. 567 bytes
  std::vector<char> err(err_len + 16, 'Z');
  char* err_ptr = err_len ? err.data() : nullptr;

  fusedops_chain ch;
  std::memset(&ch, 0xAB, sizeof ch);
  const int rc = fusedops_parse_chain(text.c_str(), &ch, err_ptr, err_len);
  require(rc == FUSEDOPS_OK || rc == FUSEDOPS_ERR_INVALID_ARGUMENT, "parse_chain status");
  if (rc == FUSEDOPS_OK) {
    check_chain(ch);
    // Whatever the parser accepts, the descriptor check accepts.
    fusedops_groupnorm_desc d{};
    d.N = 2;
    d.C = 8;
    d.S = 3;
    d.num_groups = 4;
    d.epsilon = 1e-5f;
    d.pre = ch;
    d.post = ch;
    char derr[256];
    require(fusedops_groupnorm_act_check(&d, derr, sizeof derr) == FUSEDOPS_OK, "parsed chain passes the check");
    require(fusedops_num_extras(&ch, &ch) <= FUSEDOPS_MAX_EXTRAS, "num_extras in range");
  } else {
    require(ch.num_steps == 0, "a rejected chain leaves no steps");
    check_message(err, err_len);
  }

  int32_t code = -7;
  std::fill(err.begin(), err.end(), 'Z');
  const int rrc = fusedops_parse_reduce(text.c_str(), &code, err_ptr, err_len);
  require(rrc == FUSEDOPS_OK ? fusedops_reduce_is_known(code) != 0 : rrc == FUSEDOPS_ERR_INVALID_ARGUMENT,
          "parse_reduce status and code");
  if (rrc != FUSEDOPS_OK) check_message(err, err_len);

  // The message helper on arbitrary text: a cut never leaves a broken UTF-8 sequence behind valid input.
  std::fill(err.begin(), err.end(), 'Z');
  fusedops::core::set_err(err_ptr, err_len, "%s", text.c_str());
  if (err_len) {
    const std::string got(err.data());
    const std::string whole = text.c_str();
    require(got.size() < err_len && whole.compare(0, got.size(), got) == 0, "set_err writes a prefix");
    if (valid_utf8(whole)) require(valid_utf8(got), "set_err keeps UTF-8 whole");
  }

  // Raw bytes as descriptors: the checks must not crash or hit undefined behaviour on any field values.
  if ((ctl & 0x40) && text.size() >= sizeof(fusedops_gemm_desc)) {
    fusedops_gemm_desc g;
    std::memcpy(&g, text.data(), sizeof g);
    char derr[128];
    (void)fusedops_groupnorm_act_check(&g.gn, derr, sizeof derr);
    (void)fusedops_gemm_groupnorm_act_check(&g, derr, sizeof derr);
    (void)fusedops_num_extras(&g.gn.pre, &g.gn.post);
  }
  return 0;
}
