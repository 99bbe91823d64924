// Shared declarations of fusedops_trt_harness (usage: the comment at the top of main.cpp): the logger and resource
// context handed to the plugin, the command-line options, the JSON report, and the stages implemented in
// cli_options.cpp, walk.cpp (build and runtime phases), enqueue.cpp (device buffers, timing) and report.cpp.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "NvInferRuntime.h"

namespace fusedops_harness {
using namespace nvinfer1;

// ---------------------------------------------------------------------------------------------------------------------
// Logger and logger finder given to the library through setLoggerFinder
// ---------------------------------------------------------------------------------------------------------------------
class HarnessLogger : public ILogger {
 public:
  void log(Severity severity, AsciiChar const* msg) noexcept override {
    std::string const text = msg ? msg : "";
    std::fprintf(stderr, "[plugin %s] %s\n", severity <= Severity::kERROR ? "error" : "log", text.c_str());
    if (severity <= Severity::kERROR) errors.push_back(text);
    else messages.push_back(text);
  }
  std::vector<std::string> errors;
  std::vector<std::string> messages;
};

class HarnessLoggerFinder : public ILoggerFinder {
 public:
  explicit HarnessLoggerFinder(ILogger* logger) : mLogger(logger) {}
  ~HarnessLoggerFinder() override = default;
  ILogger* findLogger() override {
    ++calls;
    return mLogger;
  }
  int calls = 0;

 private:
  ILogger* mLogger;
};

class HarnessResourceContext : public IPluginResourceContext {
 public:
  IGpuAllocator* getGpuAllocator() const noexcept override { return nullptr; }
  IErrorRecorder* getErrorRecorder() const noexcept override { return nullptr; }
  ~HarnessResourceContext() noexcept override = default;
};

// ---------------------------------------------------------------------------------------------------------------------
// Command line (cli_options.cpp)
// ---------------------------------------------------------------------------------------------------------------------
struct FieldArg {
  std::string name;
  PluginFieldType type;
  std::vector<unsigned char> bytes;
  int32_t length;
};

struct InputArg {
  std::string name;
  DataType type;
  Dims dims{};
  std::string path;
};

struct Options {
  std::string plugin;
  bool list = false;
  std::string op;
  std::string ns = "fusedops";
  std::string version = "1";
  std::vector<FieldArg> fields;
  bool noFields = false;  // pass a null PluginFieldCollection
  std::vector<InputArg> inputs;
  std::string dynamic = "batch";
  int64_t maxBatchFactor = 2;
  bool enqueue = false;
  std::string output;
  int iters = 0;
  std::string expectFail;
  std::string reportPath;
  int device = 0;
  int64_t profileBatch[3] = {-1, -1, -1};  // min, opt, max of X's dim 0; -1 = default
  bool workspaceProbe = false;
  std::vector<InputArg> runtimeInputs;   // onShapeChange + enqueue
  std::vector<InputArg> enqueueInputs;   // enqueue only
  bool runtimeOutputSet = false;
  InputArg runtimeOutput;
  bool fakeBuffers = false;
  std::string registryStub;  // stand-in libnvinfer.so.N
  std::string registryLoad = "local";
};

[[noreturn]] void usage(std::string const& msg);
Options parseArgs(int argc, char** argv);
DataType parseDtype(std::string const& s);
char const* dtypeName(DataType t);
size_t dtypeSize(DataType t);

// ---------------------------------------------------------------------------------------------------------------------
// Report (report.cpp)
// ---------------------------------------------------------------------------------------------------------------------
std::string jsonString(std::string const& s);
std::string jsonDims(Dims const& d);

struct Report {
  std::vector<std::string> stages;  // completed, in order
  std::string failedStage;
  std::string failure;  // harness-side reason (the plugin's own messages are in the logger)
  std::vector<std::pair<std::string, std::string>> values;  // extra key -> raw JSON

  void pass(std::string const& stage) { stages.push_back(stage); }
  bool fail(std::string const& stage, std::string const& why) {
    failedStage = stage;
    failure = why;
    return false;
  }
  void set(std::string const& key, std::string const& rawJson) { values.emplace_back(key, rawJson); }

  std::string json(HarnessLogger const& logger, int finderCalls) const {
    std::ostringstream s;
    s << "{\"stages\":[";
    for (size_t i = 0; i < stages.size(); ++i) s << (i ? "," : "") << jsonString(stages[i]);
    s << "],\"failed_stage\":" << (failedStage.empty() ? "null" : jsonString(failedStage));
    s << ",\"failure\":" << jsonString(failure);
    s << ",\"plugin_errors\":[";
    for (size_t i = 0; i < logger.errors.size(); ++i) s << (i ? "," : "") << jsonString(logger.errors[i]);
    s << "],\"logger_finder_calls\":" << finderCalls;
    for (auto const& kv : values) s << "," << jsonString(kv.first) << ":" << kv.second;
    s << "}";
    return s.str();
  }
};


// Prints the creators' interface kinds, names and fields as one JSON line (--list).
int listCreators(IPluginCreatorInterface* const* creators, int32_t n);

// ---------------------------------------------------------------------------------------------------------------------
// The walk (walk.cpp, enqueue.cpp)
// ---------------------------------------------------------------------------------------------------------------------
using GetCreatorsFn = IPluginCreatorInterface* const* (*)(int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

struct PluginDeleter {
  void operator()(IPluginV3* p) const { delete p; }
};
using PluginPtr = std::unique_ptr<IPluginV3, PluginDeleter>;


int64_t volumeOf(Dims const& d);
// Every call TensorRT makes on one op, build phase then runtime phase (and enqueue with --enqueue).
bool walk(Options const& o, IPluginCreatorV3One* creator, Report& report);
// Enqueue on device buffers (poisoned output and workspace), optionally timed; or on host placeholders with
// --fake-buffers.
bool runEnqueue(Options const& o, IPluginV3OneRuntime* rt, std::vector<PluginTensorDesc> const& inDesc,
                PluginTensorDesc const& outDesc, size_t workspaceBytes, Report& report);

}  // namespace fusedops_harness
