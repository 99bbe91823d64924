// fusedops_trt_harness: enqueue on device buffers (inputs from files, NaN-poisoned output, 0xFF workspace), timing
// with --iters, and the --fake-buffers refusal path that needs no CUDA.
#include <chrono>
#include "harness.h"

namespace fusedops_harness {

std::vector<unsigned char> readFile(std::string const& path, size_t expected) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<unsigned char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() != expected)
    throw std::runtime_error(path + " has " + std::to_string(data.size()) + " bytes, expected " +
                             std::to_string(expected));
  return data;
}

int64_t volumeOf(Dims const& d) {
  int64_t v = 1;
  for (int32_t i = 0; i < d.nbDims; ++i) v *= d.d[i];
  return v;
}

#define CUDA_TRY(call)                                                                              \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) return report.fail("enqueue", std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs)
      if (p) cudaFree(p);
  }
  void* alloc(size_t bytes, cudaError_t& err) {
    void* p = nullptr;
    err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    ptrs.push_back(p);
    return p;
  }
};

// Descriptions with --enqueue-input applied (enqueue only; buffers follow the onShapeChange descriptions).
std::vector<PluginTensorDesc> enqueueDescs(Options const& o, std::vector<PluginTensorDesc> inDesc) {
  for (auto const& e : o.enqueueInputs)
    for (size_t i = 0; i < o.inputs.size(); ++i)
      if (o.inputs[i].name == e.name) {
        inDesc[i].dims = e.dims;
        inDesc[i].type = e.type;
      }
  return inDesc;
}

// --fake-buffers: enqueue with host placeholders and no CUDA, for refusals on machines without a GPU.
bool runFakeEnqueue(Options const& o, IPluginV3OneRuntime* rt, std::vector<PluginTensorDesc> const& inDesc,
                    PluginTensorDesc const& outDesc, Report& report) {
  std::vector<PluginTensorDesc> const enqDesc = enqueueDescs(o, inDesc);
  std::vector<unsigned char> placeholder(64);
  std::vector<void const*> inPtrs(inDesc.size(), placeholder.data());
  void* outs[1] = {placeholder.data()};
  int32_t const rc = rt->enqueue(enqDesc.data(), &outDesc, inPtrs.data(), outs, placeholder.data(), nullptr);
  if (rc != 0) return report.fail("enqueue", "enqueue returned " + std::to_string(rc));
  report.pass("enqueue");
  return true;
}

bool runEnqueue(Options const& o, IPluginV3OneRuntime* rt, std::vector<PluginTensorDesc> const& inDesc,
                PluginTensorDesc const& outDesc, size_t workspaceBytes, Report& report) {
  if (o.fakeBuffers) return runFakeEnqueue(o, rt, inDesc, outDesc, report);
  std::vector<PluginTensorDesc> const enqDesc = enqueueDescs(o, inDesc);
  CUDA_TRY(cudaSetDevice(o.device));
  DeviceBuffers buffers;
  cudaError_t err = cudaSuccess;
  std::vector<void const*> inPtrs;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    size_t bytes = static_cast<size_t>(volumeOf(inDesc[i].dims)) * dtypeSize(inDesc[i].type);
    std::vector<unsigned char> host;
    try {
      host = readFile(o.inputs[i].path, bytes);
    } catch (std::exception const& e) {
      return report.fail("enqueue", e.what());
    }
    void* d = buffers.alloc(bytes, err);
    CUDA_TRY(err);
    CUDA_TRY(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice));
    inPtrs.push_back(d);
  }
  size_t const outBytes = static_cast<size_t>(volumeOf(outDesc.dims)) * dtypeSize(outDesc.type);
  void* out = buffers.alloc(outBytes, err);
  CUDA_TRY(err);
  CUDA_TRY(cudaMemset(out, 0xFF, outBytes));  // all-ones bits are NaN in f32 / f16 / bf16: unwritten output shows
  void* ws = buffers.alloc(workspaceBytes, err);
  CUDA_TRY(err);
  CUDA_TRY(cudaMemset(ws, 0xFF, std::max<size_t>(workspaceBytes, 1)));  // the kernels must not rely on zeroed memory
  // cudaMemset runs on the legacy default stream, which does not order against the non-blocking stream below: without
  // this wait the 0xFF fill could land after the plugin's own zeroing of its workspace counters (2026-11-23: the
  // one-pass GroupNorm then waited forever at batch 16, where the 272 MB output fill was still running).
  CUDA_TRY(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> streamGuard(stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
  void* outs[1] = {out};
  int32_t rc = rt->enqueue(enqDesc.data(), &outDesc, inPtrs.data(), outs, ws, stream);
  if (rc != 0) return report.fail("enqueue", "enqueue returned " + std::to_string(rc));
  CUDA_TRY(cudaStreamSynchronize(stream));
  CUDA_TRY(cudaGetLastError());
  std::vector<unsigned char> host(outBytes);
  CUDA_TRY(cudaMemcpy(host.data(), out, outBytes, cudaMemcpyDeviceToHost));
  if (!o.output.empty()) {
    std::ofstream f(o.output, std::ios::binary);
    f.write(reinterpret_cast<char const*>(host.data()), static_cast<std::streamsize>(host.size()));
    if (!f) return report.fail("enqueue", "cannot write " + o.output);
  }
  if (o.iters > 0) {
    cudaEvent_t start, stop;
    CUDA_TRY(cudaEventCreate(&start));
    CUDA_TRY(cudaEventCreate(&stop));
    for (int w = 0; w < 3; ++w) {
      rc = rt->enqueue(enqDesc.data(), &outDesc, inPtrs.data(), outs, ws, stream);
      if (rc != 0) return report.fail("enqueue", "warm-up enqueue returned " + std::to_string(rc));
    }
    std::vector<float> ms;
    std::vector<double> host_us;  // the host time of the enqueue call itself (issue 8 records it per adapter)
    for (int it = 0; it < o.iters; ++it) {
      CUDA_TRY(cudaEventRecord(start, stream));
      const auto t0 = std::chrono::steady_clock::now();
      rc = rt->enqueue(enqDesc.data(), &outDesc, inPtrs.data(), outs, ws, stream);
      host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      if (rc != 0) return report.fail("enqueue", "timed enqueue returned " + std::to_string(rc));
      CUDA_TRY(cudaEventRecord(stop, stream));
      CUDA_TRY(cudaEventSynchronize(stop));
      float t = 0.F;
      CUDA_TRY(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    std::sort(host_us.begin(), host_us.end());
    report.set("enqueue_ms_median", std::to_string(ms[ms.size() / 2]));
    report.set("enqueue_ms_min", std::to_string(ms.front()));
    report.set("enqueue_host_us_median", std::to_string(host_us[host_us.size() / 2]));
    report.set("timed_iters", std::to_string(o.iters));
  }
  report.set("output_bytes", std::to_string(outBytes));
  report.pass("enqueue");
  return true;
}


}  // namespace fusedops_harness
