// The workspace a fused-op plugin reserves: the kernels' largest need over the optimisation profile's shapes
// (README.md, Workspace). Split from fused_op_plugin.cpp, which holds the rest of the plugin flow.
#include <algorithm>
#include <cmath>
#include <limits>

#include "fused_op_plugin.h"

namespace fusedops::trt {

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DynamicPluginTensorDesc;

namespace {
// Values probed for one dim over [lo, hi]: all of them when there are at most `cap`; otherwise the low end densely
// (where the kernels' block-splitting makes the need non-monotone), then geometric steps up to hi.
std::vector<int64_t> probeValues(int64_t lo, int64_t hi, int64_t cap) {
  std::vector<int64_t> v;
  if (hi - lo < cap) {
    for (int64_t x = lo; x <= hi; ++x) v.push_back(x);
    return v;
  }
  int64_t const dense = std::max<int64_t>(cap / 2, 1);
  for (int64_t x = lo; x < lo + dense; ++x) v.push_back(x);
  int64_t const steps = std::max<int64_t>(cap - dense - 1, 1);
  double const start = static_cast<double>(std::max<int64_t>(lo + dense, 1));
  double const ratio = std::pow(static_cast<double>(hi) / start, 1.0 / static_cast<double>(steps));
  double x = start;
  for (int64_t s = 0; s < steps; ++s) {
    x *= ratio;
    int64_t const xi = std::llround(x);
    if (xi > v.back() && xi < hi) v.push_back(xi);
  }
  v.push_back(hi);
  return v;
}
}  // namespace

size_t FusedOpPlugin::profileWorkspace(DynamicPluginTensorDesc const* in, int32_t nbInputs) const {
  DataType const xType = in[0].desc.type;
  DataType const pType = in[numDataTypedInputs()].desc.type;
  struct Axis {
    int32_t input, dim;
    std::vector<int64_t> values;
  };
  std::vector<Axis> axes;
  double combos = 1.0;
  for (int32_t i = 0; i < nbInputs; ++i)
    for (int32_t k = 0; k < in[i].max.nbDims; ++k)
      if (in[i].min.d[k] != in[i].max.d[k]) {
        axes.push_back({i, k, {}});
        combos *= static_cast<double>(in[i].max.d[k] - in[i].min.d[k] + 1);
      }
  bool const exhaustive = combos <= static_cast<double>(kMaxWorkspaceProbes);
  int64_t const cap = exhaustive ? std::numeric_limits<int64_t>::max()
                                 : std::max<int64_t>(2, static_cast<int64_t>(std::floor(std::pow(
                                       static_cast<double>(kMaxWorkspaceProbes), 1.0 / axes.size()))));
  for (auto& a : axes)
    a.values = probeValues(std::max<int64_t>(in[a.input].min.d[a.dim], 0), in[a.input].max.d[a.dim], cap);
  std::vector<Dims> dims(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].max;
  std::vector<size_t> idx(axes.size(), 0);
  size_t bytes = 0;
  std::string err;
  RunDesc desc;
  for (;;) {
    for (size_t a = 0; a < axes.size(); ++a) dims[axes[a].input].d[axes[a].dim] = axes[a].values[idx[a]];
    // Combinations the kernels refuse (e.g. X's C against gamma's) cannot occur at runtime: skipped.
    if (volume(dims[0]) > 0 && checkedDesc(dims.data(), nbInputs, xType, pType, desc, err))
      bytes = std::max(bytes, fusedops_workspace_size(&desc));
    size_t a = 0;
    for (; a < axes.size(); ++a) {
      if (++idx[a] < axes[a].values.size()) break;
      idx[a] = 0;
    }
    if (a == axes.size()) break;
  }
  return bytes;
}

size_t FusedOpPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                                       DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept {
  try {
    std::string err;
    if (inputs == nullptr || !checkCounts(nbInputs, nbOutputs, err)) return 0;
    return profileWorkspace(inputs, nbInputs);
  } catch (...) {
    return 0;
  }
}

}  // namespace fusedops::trt
