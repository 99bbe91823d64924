// A stand-in for libnvinfer.so.<major> that holds only a plugin registry (built under the real soname in its own
// folder, build/native/stub_tensorrt/, never on a default library path). The harness loads it the ways TensorRT
// hosts load libnvinfer, to test that libfusedops_trt.so registers its creators when merely dlopen'ed:
//   getPluginRegistry()              what the plugin library looks up (weak reference, RTLD_NOLOAD, or by soname)
//   fusedops_stub_registry_list()    JSON of what is registered now, for the harness's report
// Like TensorRT's registry, registerCreator refuses a second creator with the same name, version and namespace.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "NvInferRuntime.h"

namespace {

using namespace nvinfer1;

struct Entry {
  IPluginCreatorInterface* creator;
  std::string name, version, ns;
};

bool describe(IPluginCreatorInterface& c, Entry& e) {
  InterfaceInfo const info = c.getInterfaceInfo();
  if (info.kind == nullptr || std::strcmp(info.kind, "PLUGIN CREATOR_V3ONE") != 0) return false;
  auto& v3 = static_cast<IPluginCreatorV3One&>(c);
  e = {&c, v3.getPluginName(), v3.getPluginVersion(), v3.getPluginNamespace()};
  return true;
}

class StubRegistry : public IPluginRegistry {
 public:
  bool registerCreator(IPluginCreatorInterface& creator, AsciiChar const* const pluginNamespace) noexcept override {
    std::lock_guard<std::mutex> lock(mMutex);
    Entry e{};
    if (!describe(creator, e)) return false;
    if (pluginNamespace != nullptr && e.ns != pluginNamespace) return false;  // a V3 creator names its own namespace
    for (auto const& x : mEntries)
      if (x.name == e.name && x.version == e.version && x.ns == e.ns) return false;
    mEntries.push_back(e);
    ++registrations;
    return true;
  }
  IPluginCreatorInterface* const* getAllCreators(int32_t* const n) const noexcept override {
    mList.clear();
    for (auto const& x : mEntries) mList.push_back(x.creator);
    *n = static_cast<int32_t>(mList.size());
    return mList.empty() ? nullptr : mList.data();
  }
  IPluginCreatorInterface* getCreator(AsciiChar const* const name, AsciiChar const* const version,
                                      AsciiChar const* const ns) noexcept override {
    std::lock_guard<std::mutex> lock(mMutex);
    for (auto const& x : mEntries)
      if (x.name == name && x.version == version && x.ns == (ns ? ns : "")) return x.creator;
    return nullptr;
  }
  bool deregisterCreator(IPluginCreatorInterface const& creator) noexcept override {
    std::lock_guard<std::mutex> lock(mMutex);
    for (auto it = mEntries.begin(); it != mEntries.end(); ++it)
      if (it->creator == &creator) {
        mEntries.erase(it);
        ++deregistrations;
        return true;
      }
    return false;
  }
  // Not used by plugin libraries; present because the interface requires them.
  void setErrorRecorder(IErrorRecorder* const) noexcept override {}
  IErrorRecorder* getErrorRecorder() const noexcept override { return nullptr; }
  bool isParentSearchEnabled() const override { return false; }
  void setParentSearchEnabled(bool const) override {}
  PluginLibraryHandle loadLibrary(AsciiChar const*) noexcept override { return nullptr; }
  void deregisterLibrary(PluginLibraryHandle) noexcept override {}
  IPluginResource* acquirePluginResource(AsciiChar const*, IPluginResource*) noexcept override { return nullptr; }
  int32_t releasePluginResource(AsciiChar const*) noexcept override { return -1; }
  IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const n) noexcept override {
    return getAllCreators(n);
  }

  std::string json() {
    std::lock_guard<std::mutex> lock(mMutex);
    std::string s = "{\"registrations\":" + std::to_string(registrations) +
                    ",\"deregistrations\":" + std::to_string(deregistrations) + ",\"creators\":[";
    for (size_t i = 0; i < mEntries.size(); ++i)
      s += std::string(i ? "," : "") + "\"" + mEntries[i].ns + "::" + mEntries[i].name + "/" + mEntries[i].version +
           "\"";
    return s + "]}";
  }

  int registrations = 0;
  int deregistrations = 0;

 private:
  std::mutex mMutex;
  std::vector<Entry> mEntries;
  mutable std::vector<IPluginCreatorInterface*> mList;
};

StubRegistry& registry() {
  static StubRegistry* r = new StubRegistry();  // never destroyed: creators may deregister during process exit
  return *r;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) nvinfer1::IPluginRegistry* getPluginRegistry() noexcept {
  return &registry();
}

// Writes the registry's JSON into buf (NUL-terminated, truncated to size); returns the full length.
extern "C" __attribute__((visibility("default"))) int fusedops_stub_registry_list(char* buf, int size) {
  std::string const s = registry().json();
  if (buf != nullptr && size > 0) std::snprintf(buf, static_cast<size_t>(size), "%s", s.c_str());
  return static_cast<int>(s.size());
}
