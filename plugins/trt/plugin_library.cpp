// The library's entry points, and its registration when it is merely dlopen'ed.
//
// Two ways TensorRT hosts load a plugin library:
//  1. IPluginRegistry::loadLibrary / `trtexec --dynamicPlugins` / Python `registry.load_library`: TensorRT dlopens
//     the library, calls setLoggerFinder and getCreators, and registers what getCreators returns.
//  2. Triton's TensorRT backend (`--backend-config=tensorrt,plugins=LIB`, dlopen RTLD_LOCAL) and `LD_PRELOAD=LIB
//     tritonserver`: the library is only dlopen'ed, and must register its creators itself, as REGISTER_TENSORRT_PLUGIN
//     does in libraries that link libnvinfer.
// This library links no TensorRT library (it is built and tested with the headers alone), so on load it looks for the
// process's plugin registry at run time, in this order:
//   a. `getPluginRegistry` through a weak reference: resolved when libnvinfer is in the global scope (trtexec, a
//      program linked with libnvinfer, an RTLD_GLOBAL load);
//   b. an already loaded libnvinfer.so.<major> found with dlopen(RTLD_NOLOAD) (Triton's TensorRT backend loads it
//      RTLD_LOCAL with itself, out of reach of the weak reference);
//   c. libnvinfer.so.<major of the headers> loaded by soname (LD_PRELOAD: the library initialises before any
//      TensorRT is loaded; the backend later gets this same instance, as its soname is already loaded).
// With none found (no TensorRT in the process, e.g. the headers-only harness without its stub registry) nothing is
// registered and nothing is logged. Every creator of creators() is registered (GroupNormAct, GemmGroupNormAct,
// ConvTransposeGroupNormAct). FUSEDOPS_TRT_AUTO_REGISTER=0 turns the load-time registration off.
//
// Path 1 after a load-time registration would find our creators already registered and fail ("already registered"),
// so getCreators first deregisters what the load registered and hands the creators to the caller to register.
// The library pins itself (RTLD_NODELETE) once registered: a registry must never hold creators of an unloaded library.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "NvInferVersion.h"
#include "fused_op_plugin.h"

// TENSORRTAPI exports only when building TensorRT itself; exports.map keeps these two and nothing else.
#define FUSEDOPS_TRT_EXPORT __attribute__((visibility("default")))

// Weak: null unless the process's global scope defines it (path a). Links without libnvinfer (-Wl,--no-undefined
// accepts an undefined weak symbol).
extern "C" nvinfer1::IPluginRegistry* getPluginRegistry() noexcept __attribute__((weak));

using fusedops::trt::FusedOpCreator;
using fusedops::trt::OpKind;

namespace {

using GetPluginRegistryFn = nvinfer1::IPluginRegistry* (*)();

constexpr int32_t kNumCreators = 3;

nvinfer1::IPluginCreatorInterface* const* creators(int32_t& count) {
  static FusedOpCreator sGroupNormAct(OpKind::kGroupNormAct);
  static FusedOpCreator sGemmGroupNormAct(OpKind::kGemmGroupNormAct);
  static FusedOpCreator sConvTransposeGroupNormAct(OpKind::kConvTransposeGroupNormAct);
  static nvinfer1::IPluginCreatorInterface* const kCreators[] = {&sGroupNormAct, &sGemmGroupNormAct,
                                                                 &sConvTransposeGroupNormAct};
  static_assert(sizeof(kCreators) / sizeof(kCreators[0]) == kNumCreators, "gRegisteredAtLoad has one flag each");
  count = kNumCreators;
  return kCreators;
}

std::mutex gMutex;
nvinfer1::IPluginRegistry* gLoadRegistry = nullptr;  // the registry the load-time registration used, if any
bool gRegisteredAtLoad[kNumCreators] = {};

GetPluginRegistryFn fromLibrary(char const* soname, int flags) {
  void* handle = dlopen(soname, flags);
  if (handle == nullptr) return nullptr;
  // Kept open on purpose: the registry lives in that library.
  return reinterpret_cast<GetPluginRegistryFn>(dlsym(handle, "getPluginRegistry"));
}

GetPluginRegistryFn findRegistryEntry() {
  if (getPluginRegistry != nullptr) return reinterpret_cast<GetPluginRegistryFn>(&getPluginRegistry);  // a
  std::string const ours = "libnvinfer.so." + std::to_string(NV_TENSORRT_MAJOR);
  for (std::string const& soname : {ours, std::string("libnvinfer.so.10"), std::string("libnvinfer.so.11")}) {
    if (auto fn = fromLibrary(soname.c_str(), RTLD_NOW | RTLD_NOLOAD)) return fn;  // b
  }
  return fromLibrary(ours.c_str(), RTLD_NOW | RTLD_GLOBAL);  // c
}

void pinSelf() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&pinSelf), &info) != 0 && info.dli_fname != nullptr)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

__attribute__((constructor)) void registerOnLoad() {
  char const* env = std::getenv("FUSEDOPS_TRT_AUTO_REGISTER");
  if (env != nullptr && std::strcmp(env, "0") == 0) return;
  GetPluginRegistryFn entry = findRegistryEntry();
  nvinfer1::IPluginRegistry* registry = entry ? entry() : nullptr;
  if (registry == nullptr) return;
  std::lock_guard<std::mutex> lock(gMutex);
  int32_t n = 0;
  nvinfer1::IPluginCreatorInterface* const* list = creators(n);
  bool any = false;
  for (int32_t i = 0; i < n; ++i) {
    auto* c = static_cast<FusedOpCreator*>(list[i]);
    gRegisteredAtLoad[i] = registry->registerCreator(*list[i], c->getPluginNamespace());
    if (!gRegisteredAtLoad[i])  // no logger finder exists yet at load time
      std::fprintf(stderr, "fusedops TensorRT plugins: could not register %s::%s version %s (already registered?)\n",
                   c->getPluginNamespace(), c->getPluginName(), c->getPluginVersion());
    any = any || gRegisteredAtLoad[i];
  }
  if (any) {
    gLoadRegistry = registry;
    pinSelf();
  }
}

}  // namespace

extern "C" FUSEDOPS_TRT_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  nvinfer1::IPluginCreatorInterface* const* list = creators(nbCreators);
  std::lock_guard<std::mutex> lock(gMutex);
  if (gLoadRegistry != nullptr) {  // the caller registers these itself (loadLibrary): hand them over
    for (int32_t i = 0; i < nbCreators; ++i) {
      if (gRegisteredAtLoad[i]) gLoadRegistry->deregisterCreator(*list[i]);
      gRegisteredAtLoad[i] = false;
    }
    gLoadRegistry = nullptr;
  }
  return list;
}

extern "C" FUSEDOPS_TRT_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  fusedops::trt::setLoggerFinder(finder);
}
