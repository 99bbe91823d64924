// fusedops_trt_harness: drives a TensorRT plugin library the way TensorRT does, with the TensorRT headers only (no
// libnvinfer). It dlopens the library, hands it a logger finder, takes its creators, and walks one op through the
// build phase (createPlugin, getOutputShapes with a symbolic IExprBuilder, types, formats, configurePlugin, workspace,
// serialisation) and the runtime phase (createPlugin from the serialised fields, attachToContext, onShapeChange and,
// with --enqueue, enqueue on device buffers with NaN-poisoned output). A JSON report goes to stdout (and --report).
//
//   fusedops_trt_harness --plugin LIB --list
//   fusedops_trt_harness --plugin LIB --op GemmGroupNormAct --field num_groups:i32:10 --field post:char:mish
//       --input X:f32:12x96[:x.bin] --input W:f32:160x96[:w.bin] ... [--dynamic batch|all|none]
//       [--enqueue --output y.bin [--iters 20]] [--expect-fail STAGE] [--report report.json]
//       [--profile-batch MIN:OPT:MAX] [--workspace-probe]
//       [--runtime-input NAME:DTYPE:DIMS]... [--runtime-output DTYPE:DIMS] [--enqueue-input NAME:DTYPE:DIMS]...
//       [--fake-buffers]
//   fusedops_trt_harness --plugin LIB --registry-stub STUB --registry-load local|global|soname
//
// --profile-batch sets X's batch range (default 1 : actual : max-batch-factor x actual). --workspace-probe also asks
// getWorkspaceSize for every single batch of that range (min = opt = max) and fails the "workspace" stage if the
// profile's answer is below any of them. --runtime-input / --runtime-output replace the descriptions onShapeChange and
// enqueue get (shapes the build phase never saw); --enqueue-input replaces them for enqueue only. --fake-buffers
// (with --expect-fail enqueue only) enqueues with host placeholders and no CUDA, to test refusals on machines
// without a GPU: a plugin that accepted would hand them to its kernels.
//
// --registry-stub tests registration on dlopen against the stand-in libnvinfer (tests/trt_harness/stub_nvinfer.cpp), loaded
// before the plugin as Triton's TensorRT backend has it (local: RTLD_LOCAL), as trtexec has it (global: RTLD_GLOBAL)
// or not at all (soname: the plugin must load it by soname, as under LD_PRELOAD; LD_LIBRARY_PATH must reach it). It
// reports the stub's creators after the dlopen, after getCreators (which hands them back), and after registering
// getCreators' list as loadLibrary does.
//
// Exit status: 0 when the walk ended as expected (all stages passed, or it failed exactly at --expect-fail with an
//
// Sources: harness.h (shared declarations), cli_options.cpp, walk.cpp + expr_builder.h, enqueue.cpp, report.cpp.
#include "harness.h"

namespace fusedops_harness {
namespace {

// Registration on dlopen, against the stand-in registry (see --registry-stub above). Prints one JSON line.
int registryWalk(Options const& o) {
  using ListFn = int (*)(char*, int);
  using RegistryFn = IPluginRegistry* (*)();
  if (o.registryLoad != "soname" &&
      dlopen(o.registryStub.c_str(), RTLD_NOW | (o.registryLoad == "global" ? RTLD_GLOBAL : RTLD_LOCAL)) == nullptr) {
    std::fprintf(stderr, "fusedops_trt_harness: cannot load the stub registry: %s\n", dlerror());
    return 2;
  }
  void* lib = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);  // as Triton's TensorRT backend opens plugins
  if (lib == nullptr) {
    std::fprintf(stderr, "fusedops_trt_harness: dlopen failed: %s\n", dlerror());
    return 1;
  }
  // The stub as loaded now (by us, or by the plugin by soname); never a fresh copy.
  void* stub = dlopen(o.registryStub.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (stub == nullptr) {
    std::string const soname = o.registryStub.substr(o.registryStub.rfind('/') + 1);
    stub = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  }
  std::string const loaded = stub ? "true" : "false";
  auto list = stub ? reinterpret_cast<ListFn>(dlsym(stub, "fusedops_stub_registry_list")) : nullptr;
  auto registryFn = stub ? reinterpret_cast<RegistryFn>(dlsym(stub, "getPluginRegistry")) : nullptr;
  auto snapshot = [&]() -> std::string {
    if (list == nullptr) return "null";
    std::vector<char> buf(static_cast<size_t>(list(nullptr, 0)) + 1);
    list(buf.data(), static_cast<int>(buf.size()));
    return buf.data();
  };
  std::string const onLoad = snapshot();
  auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib, "getCreators"));
  if (getCreators == nullptr) return 1;
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  std::string const afterGet = snapshot();
  bool allRegistered = registryFn != nullptr && n > 0;  // what loadLibrary does with getCreators' list
  for (int32_t i = 0; allRegistered && i < n; ++i) {
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    allRegistered = registryFn()->registerCreator(*creators[i], c->getPluginNamespace());
  }
  std::printf("{\"stub_loaded\":%s,\"on_load\":%s,\"after_get_creators\":%s,\"load_library_registered\":%s,"
              "\"after_load_library\":%s}\n",
              loaded.c_str(), onLoad.c_str(), afterGet.c_str(), allRegistered ? "true" : "false", snapshot().c_str());
  return 0;
}


}  // namespace
}  // namespace fusedops_harness

using namespace fusedops_harness;

int main(int argc, char** argv) {
  Options o = parseArgs(argc, argv);
  if (!o.registryStub.empty()) return registryWalk(o);
  HarnessLogger logger;
  HarnessLoggerFinder finder(&logger);
  Report report;

  // RTLD_LOCAL, like TensorRT's loadLibrary: the plugin must not need symbols from anything loaded before it.
  void* lib = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "fusedops_trt_harness: dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib, "getCreators"));
  auto setFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(lib, "setLoggerFinder"));
  if (getCreators == nullptr || setFinder == nullptr) {
    std::fprintf(stderr, "fusedops_trt_harness: %s lacks getCreators or setLoggerFinder\n", o.plugin.c_str());
    return 1;
  }
  setFinder(&finder);
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  if (creators == nullptr || n <= 0) {
    std::fprintf(stderr, "fusedops_trt_harness: getCreators returned no creators\n");
    return 1;
  }
  if (o.list) return listCreators(creators, n);
  report.pass("load");

  IPluginCreatorV3One* creator = nullptr;
  for (int32_t i = 0; i < n; ++i) {
    InterfaceInfo info = creators[i]->getInterfaceInfo();
    if (info.kind == nullptr || std::string(info.kind) != "PLUGIN CREATOR_V3ONE") continue;
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (o.op == c->getPluginName() && o.ns == c->getPluginNamespace() && o.version == c->getPluginVersion())
      creator = c;
  }
  bool ok = false;
  if (creator == nullptr) {
    report.fail("creator", "no creator for " + o.ns + "::" + o.op + " version " + o.version);
  } else {
    report.pass("creator");
    try {
      ok = walk(o, creator, report);
    } catch (std::exception const& e) {
      report.fail(report.failedStage.empty() ? "harness" : report.failedStage, e.what());
    }
  }
  bool expected;
  if (o.expectFail.empty()) {
    expected = ok;
  } else {
    // A clean rejection: it failed where expected, and the plugin said why through the logger.
    expected = !ok && report.failedStage == o.expectFail && !logger.errors.empty();
  }
  report.set("expected_outcome", expected ? "true" : "false");
  std::string const json = report.json(logger, finder.calls);
  std::printf("%s\n", json.c_str());
  if (!o.reportPath.empty()) std::ofstream(o.reportPath) << json << "\n";
  // The library stays loaded (TensorRT never unloads a plugin library while its plugins may live).
  return expected ? 0 : 1;
}

