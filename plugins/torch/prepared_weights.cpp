// The PyTorch ops' cache of prepared weights (prepared_weights.h). Keyed by W's TensorImpl, holding a weak reference
// to it: while the reference is held the address cannot be reused by another tensor, and an expired one means W is
// gone (its entry is dropped at the next insertion). A form is reused only while W's data pointer, size and version
// counter are those it was made from: an in-place change (load_state_dict, optimizer steps, copy_ under no_grad)
// makes a new one. Changes autograd does not see (through .data or raw pointers) need forget_prepared_weights(),
// as TensorRT's refit or torch.compile's frozen weights need their own refresh.
#include "prepared_weights.h"

#include <c10/core/TensorImpl.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace fusedops_torch {
namespace {

struct Form {
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;
  const void* data = nullptr;
  int64_t version = 0;
  at::Tensor prepared;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<const c10::TensorImpl*, Form> forms;
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: forms may be in use during static destruction
  return *c;
}
std::atomic<bool> g_enabled{true};

bool current(const Form& f, const at::Tensor& w, size_t bytes) {
  return !f.owner.expired() && f.data == w.data_ptr() && f.version == w._version() &&
         static_cast<size_t>(f.prepared.nbytes()) == bytes;
}

}  // namespace

at::Tensor prepared_weights_for(const fusedops_plan* plan, size_t bytes, const at::Tensor& w,
                                const c10::Stream& stream) {
  if (bytes == 0 || !g_enabled.load(std::memory_order_relaxed) || w.is_inference()) return {};
  const c10::TensorImpl* key = w.unsafeGetTensorImpl();
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.forms.find(key);
    if (it != c.forms.end() && current(it->second, w, bytes)) return it->second.prepared;
  }
  at::Tensor prepared = at::empty({static_cast<int64_t>(bytes)}, w.options().dtype(at::kByte));
  char err[512] = {0};
  const int rc = fusedops_plan_prepare_weights(plan, w.data_ptr(), prepared.data_ptr(), bytes,
                                               reinterpret_cast<fusedops_stream_t>(stream.native_handle()), err,
                                               sizeof err);
  // A stream being captured (or any failure to prepare): run on W itself, as without a form.
  if (rc != FUSEDOPS_OK) return {};
  // Other streams may use the form next: it must be written before this returns.
  stream.synchronize();
  Form f{c10::weak_intrusive_ptr<c10::TensorImpl>(w.getIntrusivePtr()), w.data_ptr(), w._version(), prepared};
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto it = c.forms.begin(); it != c.forms.end();) it = it->second.owner.expired() ? c.forms.erase(it) : ++it;
  c.forms.insert_or_assign(key, std::move(f));
  return prepared;
}

void forget_prepared_weights() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.forms.clear();
}

void set_prepared_weights(bool on) {
  g_enabled.store(on);
  if (!on) forget_prepared_weights();
}

int64_t prepared_weights_count() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return static_cast<int64_t>(c.forms.size());
}

}  // namespace fusedops_torch
