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
// --registry-stub tests registration on dlopen against the stand-in libnvinfer (harness/stub_nvinfer.cpp), loaded
// before the plugin as Triton's TensorRT backend has it (local: RTLD_LOCAL), as trtexec has it (global: RTLD_GLOBAL)
// or not at all (soname: the plugin must load it by soname, as under LD_PRELOAD; LD_LIBRARY_PATH must reach it). It
// reports the stub's creators after the dlopen, after getCreators (which hands them back), and after registering
// getCreators' list as loadLibrary does.
//
// Exit status: 0 when the walk ended as expected (all stages passed, or it failed exactly at --expect-fail with an
// error logged through the logger finder), 1 otherwise, 2 for bad usage.
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

using namespace nvinfer1;

namespace {

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
// Symbolic dimension expressions: the public wrappers IDimensionExpr / IExprBuilder backed by our own apiv
// implementations. An expression is a small tree over named symbols, so the harness can evaluate one output shape at
// the actual, min, opt and max bindings, and see whether the plugin kept the batch dimension symbolic.
// ---------------------------------------------------------------------------------------------------------------------
class Expr : public IDimensionExpr {
 public:
  enum class Kind { kConstant, kSymbol, kOperation };

  Expr(Kind kind, int64_t value, int32_t symbol, DimensionOperation op, Expr const* lhs, Expr const* rhs)
      : kind(kind), value(value), symbol(symbol), op(op), lhs(lhs), rhs(rhs) {
    mImplObject.owner = this;
    mImpl = &mImplObject;
  }
  ~Expr() noexcept override = default;

  // Value under a binding of the symbols; false on division by zero.
  bool eval(std::vector<int64_t> const& binding, int64_t& out) const {
    switch (kind) {
      case Kind::kConstant: out = value; return true;
      case Kind::kSymbol: out = binding.at(symbol); return true;
      case Kind::kOperation: break;
    }
    int64_t a = 0, b = 0;
    if (!lhs->eval(binding, a) || !rhs->eval(binding, b)) return false;
    return apply(op, a, b, out);
  }

  static bool apply(DimensionOperation op, int64_t a, int64_t b, int64_t& out) {
    switch (op) {
      case DimensionOperation::kSUM: out = a + b; return true;
      case DimensionOperation::kPROD: out = a * b; return true;
      case DimensionOperation::kMAX: out = std::max(a, b); return true;
      case DimensionOperation::kMIN: out = std::min(a, b); return true;
      case DimensionOperation::kSUB: out = a - b; return true;
      case DimensionOperation::kEQUAL: out = a == b; return true;
      case DimensionOperation::kLESS: out = a < b; return true;
      case DimensionOperation::kFLOOR_DIV:
        if (b == 0) return false;
        out = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
        return true;
      case DimensionOperation::kCEIL_DIV:
        if (b == 0) return false;
        out = -((-a) / b - (((-a) % b != 0) && (((-a) < 0) != (b < 0))));
        return true;
    }
    return false;
  }

  std::string text(std::vector<std::string> const& names) const {
    static char const* const kOps[] = {"+", "*", "max", "min", "-", "==", "<", "//", "ceildiv"};
    switch (kind) {
      case Kind::kConstant: return std::to_string(value);
      case Kind::kSymbol: return names.at(symbol);
      case Kind::kOperation: break;
    }
    return "(" + lhs->text(names) + " " + kOps[static_cast<int>(op)] + " " + rhs->text(names) + ")";
  }

  Kind kind;
  int64_t value;
  int32_t symbol;
  DimensionOperation op;
  Expr const* lhs;
  Expr const* rhs;

 private:
  struct Impl : apiv::VDimensionExpr {
    Expr* owner = nullptr;
    bool isConstant() const override { return owner->kind == Kind::kConstant; }
    // A non-constant expression has no value; a plugin that asks anyway gets an absurd one and fails visibly.
    int64_t getConstantValue() const override { return isConstant() ? owner->value : INT64_MIN; }
    bool isSizeTensor() const override { return false; }
  } mImplObject;
};

class ExprBuilder : public IExprBuilder {
 public:
  ExprBuilder() {
    mImplObject.owner = this;
    mImpl = &mImplObject;
  }
  ~ExprBuilder() noexcept override = default;

  Expr const* makeConstant(int64_t v) { return add(Expr::Kind::kConstant, v, -1, DimensionOperation::kSUM, nullptr, nullptr); }
  Expr const* makeSymbol(std::string name) {
    names.push_back(std::move(name));
    return add(Expr::Kind::kSymbol, 0, static_cast<int32_t>(names.size() - 1), DimensionOperation::kSUM, nullptr,
               nullptr);
  }
  Expr const* makeOperation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) {
    auto const* ea = owned(&a);
    auto const* eb = owned(&b);
    if (ea == nullptr || eb == nullptr) {
      foreignExpressions = true;
      return nullptr;
    }
    int64_t v = 0;
    if (ea->kind == Expr::Kind::kConstant && eb->kind == Expr::Kind::kConstant && Expr::apply(op, ea->value, eb->value, v))
      return makeConstant(v);  // constant folding, as TensorRT does
    return add(Expr::Kind::kOperation, 0, -1, op, ea, eb);
  }
  // Expressions the plugin returns must be ones this builder made (or the input expressions).
  Expr const* owned(IDimensionExpr const* e) const {
    for (auto const& p : mExprs)
      if (p.get() == e) return p.get();
    return nullptr;
  }

  std::vector<std::string> names;
  bool foreignExpressions = false;
  bool declaredSizeTensor = false;

 private:
  Expr const* add(Expr::Kind kind, int64_t v, int32_t sym, DimensionOperation op, Expr const* a, Expr const* b) {
    mExprs.push_back(std::make_unique<Expr>(kind, v, sym, op, a, b));
    return mExprs.back().get();
  }
  struct Impl : apiv::VExprBuilder {
    ExprBuilder* owner = nullptr;
    IDimensionExpr const* constant(int64_t value) override { return owner->makeConstant(value); }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override {
      return owner->makeOperation(op, a, b);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override {
      owner->declaredSizeTensor = true;  // our ops have no data-dependent shapes
      return nullptr;
    }
  } mImplObject;
  std::deque<std::unique_ptr<Expr>> mExprs;
};

// ---------------------------------------------------------------------------------------------------------------------
// Command line
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

[[noreturn]] void usage(std::string const& msg) {
  std::fprintf(stderr, "fusedops_trt_harness: %s\n(see the comment at the top of trt_harness.cpp for usage)\n",
               msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(std::string const& s, char sep, size_t maxParts = std::string::npos) {
  std::vector<std::string> out;
  size_t start = 0;
  while (out.size() + 1 < maxParts) {
    size_t p = s.find(sep, start);
    if (p == std::string::npos) break;
    out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
  out.push_back(s.substr(start));
  return out;
}

template <typename T>
void appendValues(FieldArg& f, std::string const& text, bool list) {
  std::vector<std::string> parts = list ? split(text, ',') : std::vector<std::string>{text};
  if (list && text.empty()) parts.clear();
  for (auto const& p : parts) {
    T v;
    if constexpr (std::is_floating_point_v<T>) v = static_cast<T>(std::stod(p));
    else v = static_cast<T>(std::stoll(p));
    unsigned char const* b = reinterpret_cast<unsigned char const*>(&v);
    f.bytes.insert(f.bytes.end(), b, b + sizeof(T));
  }
  f.length = static_cast<int32_t>(parts.size());
}

// NAME:TYPE:VALUE with TYPE in i8 i16 i32 i64 f32 f64 char (a trailing 's' = a comma-separated list, e.g. i32s:1,2)
// and `charz` (a string passed with its terminating NUL), `len=N` overrides the length (corrupt-length tests).
FieldArg parseField(std::string const& arg) {
  auto parts = split(arg, ':', 3);
  if (parts.size() != 3) usage("--field wants NAME:TYPE:VALUE, got '" + arg + "'");
  FieldArg f;
  f.name = parts[0];
  std::string type = parts[1];
  std::string lengthOverride;
  if (auto at = type.find('@'); at != std::string::npos) {  // TYPE@LEN: force the length field
    lengthOverride = type.substr(at + 1);
    type = type.substr(0, at);
  }
  bool const list = type.size() > 1 && type.back() == 's' && type != "chars";
  std::string const base = list ? type.substr(0, type.size() - 1) : type;
  try {
    if (base == "i8") { f.type = PluginFieldType::kINT8; appendValues<int8_t>(f, parts[2], list); }
    else if (base == "i16") { f.type = PluginFieldType::kINT16; appendValues<int16_t>(f, parts[2], list); }
    else if (base == "i32") { f.type = PluginFieldType::kINT32; appendValues<int32_t>(f, parts[2], list); }
    else if (base == "i64") { f.type = PluginFieldType::kINT64; appendValues<int64_t>(f, parts[2], list); }
    else if (base == "f32") { f.type = PluginFieldType::kFLOAT32; appendValues<float>(f, parts[2], list); }
    else if (base == "f64") { f.type = PluginFieldType::kFLOAT64; appendValues<double>(f, parts[2], list); }
    else if (base == "char" || base == "charz") {
      f.type = PluginFieldType::kCHAR;
      f.bytes.assign(parts[2].begin(), parts[2].end());
      if (base == "charz") f.bytes.push_back(0);
      f.length = static_cast<int32_t>(f.bytes.size());
    } else {
      usage("unknown field type '" + type + "'");
    }
  } catch (std::exception const&) {
    usage("bad value in --field " + arg);
  }
  if (!lengthOverride.empty()) f.length = std::stoi(lengthOverride);
  return f;
}

DataType parseDtype(std::string const& s) {
  if (s == "f32") return DataType::kFLOAT;
  if (s == "f16") return DataType::kHALF;
  if (s == "bf16") return DataType::kBF16;
  if (s == "i32") return DataType::kINT32;
  usage("unknown dtype '" + s + "' (f32, f16, bf16, i32)");
}

char const* dtypeName(DataType t) {
  switch (t) {
    case DataType::kFLOAT: return "f32";
    case DataType::kHALF: return "f16";
    case DataType::kBF16: return "bf16";
    case DataType::kINT32: return "i32";
    default: return "other";
  }
}

size_t dtypeSize(DataType t) { return t == DataType::kHALF || t == DataType::kBF16 ? 2 : 4; }

// NAME:DTYPE:D0xD1x...[:PATH]
InputArg parseInput(std::string const& arg) {
  auto parts = split(arg, ':', 4);
  if (parts.size() < 3) usage("--input wants NAME:DTYPE:DIMS[:PATH], got '" + arg + "'");
  InputArg in;
  in.name = parts[0];
  in.type = parseDtype(parts[1]);
  auto dims = split(parts[2], 'x');
  if (dims.size() > static_cast<size_t>(Dims::MAX_DIMS)) usage("too many dims in " + arg);
  in.dims.nbDims = static_cast<int32_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    try {
      in.dims.d[i] = std::stoll(dims[i]);
    } catch (std::exception const&) {
      usage("bad dims in --input " + arg);
    }
  }
  if (parts.size() == 4) in.path = parts[3];
  return in;
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--plugin") o.plugin = next();
    else if (a == "--list") o.list = true;
    else if (a == "--op") o.op = next();
    else if (a == "--namespace") o.ns = next();
    else if (a == "--version") o.version = next();
    else if (a == "--field") o.fields.push_back(parseField(next()));
    else if (a == "--no-fields") o.noFields = true;
    else if (a == "--input") o.inputs.push_back(parseInput(next()));
    else if (a == "--dynamic") o.dynamic = next();
    else if (a == "--max-batch-factor") o.maxBatchFactor = std::stoll(next());
    else if (a == "--enqueue") o.enqueue = true;
    else if (a == "--output") o.output = next();
    else if (a == "--iters") o.iters = std::stoi(next());
    else if (a == "--expect-fail") o.expectFail = next();
    else if (a == "--report") o.reportPath = next();
    else if (a == "--device") o.device = std::stoi(next());
    else if (a == "--profile-batch") {
      auto parts = split(next(), ':');
      if (parts.size() != 3) usage("--profile-batch wants MIN:OPT:MAX");
      for (int k = 0; k < 3; ++k) o.profileBatch[k] = std::stoll(parts[k]);
      if (o.profileBatch[0] < 0 || o.profileBatch[0] > o.profileBatch[1] || o.profileBatch[1] > o.profileBatch[2])
        usage("--profile-batch needs 0 <= MIN <= OPT <= MAX");
    }
    else if (a == "--workspace-probe") o.workspaceProbe = true;
    else if (a == "--runtime-input") o.runtimeInputs.push_back(parseInput(next()));
    else if (a == "--enqueue-input") o.enqueueInputs.push_back(parseInput(next()));
    else if (a == "--runtime-output") {
      o.runtimeOutput = parseInput("Y:" + next());
      o.runtimeOutputSet = true;
    }
    else if (a == "--fake-buffers") o.fakeBuffers = true;
    else if (a == "--registry-stub") o.registryStub = next();
    else if (a == "--registry-load") o.registryLoad = next();
    else usage("unknown argument '" + a + "'");
  }
  if (o.plugin.empty()) usage("--plugin is required");
  if (!o.registryStub.empty()) {
    if (o.registryLoad != "local" && o.registryLoad != "global" && o.registryLoad != "soname")
      usage("--registry-load is local, global or soname");
    return o;
  }
  if (!o.list && o.op.empty()) usage("--op is required (or --list)");
  if (!o.list && o.inputs.empty()) usage("at least one --input is required");
  if (o.dynamic != "batch" && o.dynamic != "all" && o.dynamic != "none") usage("--dynamic is batch, all or none");
  if (o.fakeBuffers && o.expectFail != "enqueue") usage("--fake-buffers is for --expect-fail enqueue only");
  if (o.fakeBuffers) o.enqueue = true;
  if (o.enqueue && !o.fakeBuffers) {
    for (auto const& in : o.inputs)
      if (in.path.empty()) usage("--enqueue needs a data file for every input (" + in.name + ")");
  }
  auto known = [&](std::vector<InputArg> const& overrides, char const* flag) {
    for (auto const& r : overrides)
      if (std::none_of(o.inputs.begin(), o.inputs.end(), [&](InputArg const& in) { return in.name == r.name; }))
        usage(std::string(flag) + " names no --input: " + r.name);
  };
  known(o.runtimeInputs, "--runtime-input");
  known(o.enqueueInputs, "--enqueue-input");
  return o;
}

// ---------------------------------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------------------------------
std::string jsonString(std::string const& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string jsonDims(Dims const& d) {
  std::string s = "[";
  for (int32_t i = 0; i < d.nbDims; ++i) s += (i ? "," : "") + std::to_string(d.d[i]);
  return s + "]";
}

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

// ---------------------------------------------------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------------------------------------------------
using GetCreatorsFn = IPluginCreatorInterface* const* (*)(int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

struct PluginDeleter {
  void operator()(IPluginV3* p) const { delete p; }
};
using PluginPtr = std::unique_ptr<IPluginV3, PluginDeleter>;

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
    for (int it = 0; it < o.iters; ++it) {
      CUDA_TRY(cudaEventRecord(start, stream));
      rc = rt->enqueue(enqDesc.data(), &outDesc, inPtrs.data(), outs, ws, stream);
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
    report.set("enqueue_ms_median", std::to_string(ms[ms.size() / 2]));
    report.set("enqueue_ms_min", std::to_string(ms.front()));
    report.set("timed_iters", std::to_string(o.iters));
  }
  report.set("output_bytes", std::to_string(outBytes));
  report.pass("enqueue");
  return true;
}

bool walk(Options const& o, IPluginCreatorV3One* creator, Report& report) {
  int32_t const nbInputs = static_cast<int32_t>(o.inputs.size());
  std::vector<PluginField> fields;
  for (auto const& f : o.fields) fields.emplace_back(f.name.c_str(), f.bytes.data(), f.type, f.length);
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};

  // ---- build phase ----
  PluginPtr plugin(creator->createPlugin(o.op.c_str(), o.noFields ? nullptr : &fc, TensorRTPhase::kBUILD));
  if (!plugin) return report.fail("create", "createPlugin(kBUILD) returned null");
  auto* core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
  auto* build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
  if (core == nullptr || build == nullptr) return report.fail("create", "missing core or build capability");
  if (std::string(core->getPluginName()) != o.op || std::string(core->getPluginNamespace()) != o.ns ||
      std::string(core->getPluginVersion()) != o.version)
    return report.fail("create", "plugin name / namespace / version differ from the creator's");
  report.pass("create");

  if (build->getNbOutputs() != 1) return report.fail("output_shapes", "getNbOutputs() != 1");
  ExprBuilder eb;
  std::vector<DimsExprs> inExprs(nbInputs);
  // Which dims of X are symbolic: batch = dim 0; all = every dim; none = static shapes.
  std::vector<int64_t> actual;
  std::vector<std::pair<int32_t, int32_t>> symbolDims;  // (input, dim) per symbol
  for (int32_t i = 0; i < nbInputs; ++i) {
    Dims const& d = o.inputs[i].dims;
    inExprs[i].nbDims = d.nbDims;
    for (int32_t k = 0; k < d.nbDims; ++k) {
      bool const symbolic = i == 0 && (o.dynamic == "all" || (o.dynamic == "batch" && k == 0));
      if (symbolic) {
        inExprs[i].d[k] = eb.makeSymbol(o.inputs[i].name + "." + std::to_string(k));
        actual.push_back(d.d[k]);
        symbolDims.emplace_back(i, k);
      } else {
        inExprs[i].d[k] = eb.makeConstant(d.d[k]);
      }
    }
  }
  DimsExprs outExprs{};
  if (build->getOutputShapes(inExprs.data(), nbInputs, nullptr, 0, &outExprs, 1, eb) != 0)
    return report.fail("output_shapes", "getOutputShapes returned an error");
  if (eb.foreignExpressions || eb.declaredSizeTensor)
    return report.fail("output_shapes", "plugin used foreign expressions or declared a size tensor");
  // Min / opt / max bindings: the batch symbol ranges over [1, factor * actual] (or --profile-batch); other symbols
  // stay at their value.
  int64_t const batch0 = o.inputs[0].dims.d[0];
  int64_t const batchRange[3] = {o.profileBatch[0] >= 0 ? o.profileBatch[0] : 1,
                                 o.profileBatch[1] >= 0 ? o.profileBatch[1] : batch0,
                                 o.profileBatch[2] >= 0 ? o.profileBatch[2] : batch0 * o.maxBatchFactor};
  auto binding = [&](int which) {
    std::vector<int64_t> b = actual;
    for (size_t s = 0; s < b.size(); ++s)
      if (symbolDims[s].second == 0) b[s] = batchRange[which];
    return b;
  };
  auto evalOut = [&](std::vector<int64_t> const& b, Dims& out) -> bool {
    out.nbDims = outExprs.nbDims;
    for (int32_t k = 0; k < outExprs.nbDims; ++k) {
      Expr const* e = eb.owned(outExprs.d[k]);
      if (e == nullptr || !e->eval(b, out.d[k]) || out.d[k] < 0) return false;
    }
    return true;
  };
  Dims outActual{}, outMin{}, outOpt{}, outMax{};
  if (outExprs.nbDims < 1 || outExprs.nbDims > Dims::MAX_DIMS || !evalOut(actual, outActual) ||
      !evalOut(binding(0), outMin) || !evalOut(binding(1), outOpt) || !evalOut(binding(2), outMax))
    return report.fail("output_shapes", "output expressions do not evaluate");
  std::string exprText = "[";
  for (int32_t k = 0; k < outExprs.nbDims; ++k) exprText += (k ? "," : "") + jsonString(eb.owned(outExprs.d[k])->text(eb.names));
  report.set("output_shape_exprs", exprText + "]");
  report.set("output_shape", jsonDims(outActual));
  if (o.dynamic != "none" && eb.owned(outExprs.d[0])->kind == Expr::Kind::kConstant)
    return report.fail("output_shapes", "the output's batch dimension was folded to a constant");
  report.pass("output_shapes");

  std::vector<DataType> inTypes;
  for (auto const& in : o.inputs) inTypes.push_back(in.type);
  DataType outType = DataType::kINT8;
  if (build->getOutputDataTypes(&outType, 1, inTypes.data(), nbInputs) != 0)
    return report.fail("output_types", "getOutputDataTypes returned an error");
  if (outType != inTypes[0]) return report.fail("output_types", "output type differs from X's type");
  report.set("output_dtype", jsonString(dtypeName(outType)));
  report.pass("output_types");

  // ---- formats: TensorRT asks position by position, earlier positions already fixed ----
  std::vector<DynamicPluginTensorDesc> io(nbInputs + 1);
  auto fillDesc = [&](DynamicPluginTensorDesc& d, Dims const& actualDims, Dims const& mn, Dims const& opt,
                      Dims const& mx, DataType t, bool symbolicBatch, bool allSymbolic) {
    d.desc.dims = actualDims;
    for (int32_t k = 0; k < actualDims.nbDims; ++k)
      if (allSymbolic || (symbolicBatch && k == 0)) d.desc.dims.d[k] = -1;
    d.desc.type = t;
    d.desc.format = TensorFormat::kLINEAR;
    d.desc.scale = -1.F;
    d.min = mn;
    d.opt = opt;
    d.max = mx;
  };
  for (int32_t i = 0; i < nbInputs; ++i) {
    Dims mn = o.inputs[i].dims, opt = mn, mx = mn;
    if (i == 0 && o.dynamic != "none") {
      mn.d[0] = batchRange[0];
      opt.d[0] = batchRange[1];
      mx.d[0] = batchRange[2];
    }
    fillDesc(io[i], o.inputs[i].dims, mn, opt, mx, inTypes[i], i == 0 && o.dynamic != "none",
             i == 0 && o.dynamic == "all");
  }
  fillDesc(io[nbInputs], outActual, outMin, outOpt, outMax, outType, o.dynamic != "none", o.dynamic == "all");
  for (int32_t pos = 0; pos <= nbInputs; ++pos) {
    if (!build->supportsFormatCombination(pos, io.data(), nbInputs, 1))
      return report.fail("formats", "supportsFormatCombination rejected position " + std::to_string(pos) + " (" +
                                        dtypeName(io[pos].desc.type) + ", LINEAR)");
  }
  // Combinations a correct plugin refuses: INT32 data, a mixed output type, a non-linear format.
  int refused = 0;
  {
    auto probe = io;
    probe[0].desc.type = DataType::kINT32;
    refused += !build->supportsFormatCombination(0, probe.data(), nbInputs, 1);
    probe = io;
    probe[nbInputs].desc.type = inTypes[0] == DataType::kFLOAT ? DataType::kHALF : DataType::kFLOAT;
    refused += !build->supportsFormatCombination(nbInputs, probe.data(), nbInputs, 1);
    probe = io;
    probe[0].desc.format = TensorFormat::kCHW32;
    refused += !build->supportsFormatCombination(0, probe.data(), nbInputs, 1);
  }
  report.set("format_probes_refused", std::to_string(refused) + "");
  if (refused != 3) return report.fail("formats", "plugin accepted an unsupported format combination");
  report.pass("formats");

  if (build->configurePlugin(io.data(), nbInputs, &io[nbInputs], 1) != 0)
    return report.fail("configure", "configurePlugin returned an error");
  report.pass("configure");

  size_t const workspaceBytes = build->getWorkspaceSize(io.data(), nbInputs, &io[nbInputs], 1);
  report.set("workspace_bytes", std::to_string(workspaceBytes));
  if (o.workspaceProbe && o.dynamic != "none") {
    // Every single batch of the profile as its own one-shape profile: the profile's answer must cover each.
    size_t maxNeed = 0;
    int64_t argmax = batchRange[0], count = 0;
    std::string needs = "[";
    for (int64_t b = batchRange[0]; b <= batchRange[2]; ++b, ++count) {
      auto one = io;
      one[0].min.d[0] = one[0].opt.d[0] = one[0].max.d[0] = b;
      std::vector<int64_t> bind = actual;
      for (size_t sy = 0; sy < bind.size(); ++sy)
        if (symbolDims[sy].second == 0) bind[sy] = b;
      Dims outB{};
      if (!evalOut(bind, outB)) return report.fail("workspace", "output expressions do not evaluate at a probe");
      one[nbInputs].min = one[nbInputs].opt = one[nbInputs].max = outB;
      size_t const need = build->getWorkspaceSize(one.data(), nbInputs, &one[nbInputs], 1);
      if (count < 4096) needs += (count ? "," : "") + std::to_string(need);
      if (need > maxNeed) {
        maxNeed = need;
        argmax = b;
      }
    }
    report.set("workspace_probe", "{\"batches\":" + std::to_string(count) + ",\"max_need\":" +
                                      std::to_string(maxNeed) + ",\"argmax_batch\":" + std::to_string(argmax) +
                                      ",\"needs\":" + needs + "]}");
    if (workspaceBytes < maxNeed)
      return report.fail("workspace", "getWorkspaceSize gave " + std::to_string(workspaceBytes) +
                                          " bytes for the profile but batch " + std::to_string(argmax) + " needs " +
                                          std::to_string(maxNeed));
  }
  report.pass("workspace");

  // ---- serialise, then build the runtime-phase plugin from the fields alone, as deserialisation does ----
  auto* runtime0 = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  if (runtime0 == nullptr) return report.fail("serialize", "missing runtime capability");
  PluginFieldCollection const* serialized = runtime0->getFieldsToSerialize();
  if (serialized == nullptr || serialized->nbFields < 0 || (serialized->nbFields > 0 && serialized->fields == nullptr))
    return report.fail("serialize", "getFieldsToSerialize returned nothing usable");
  // Deep copy (the plugin owns that memory), then destroy the build-phase plugin before using the copy.
  std::vector<std::string> names;
  std::vector<std::vector<unsigned char>> blobs;
  std::vector<PluginField> copied;
  std::string serializedJson = "[";
  names.reserve(serialized->nbFields);
  blobs.reserve(serialized->nbFields);
  for (int32_t i = 0; i < serialized->nbFields; ++i) {
    PluginField const& f = serialized->fields[i];
    size_t elem = 1;
    switch (f.type) {
      case PluginFieldType::kINT32: case PluginFieldType::kFLOAT32: elem = 4; break;
      case PluginFieldType::kINT64: case PluginFieldType::kFLOAT64: elem = 8; break;
      case PluginFieldType::kINT16: case PluginFieldType::kFLOAT16: case PluginFieldType::kBF16: elem = 2; break;
      default: elem = 1;
    }
    names.emplace_back(f.name ? f.name : "");
    unsigned char const* p = static_cast<unsigned char const*>(f.data);
    blobs.emplace_back(p, p + (p ? elem * static_cast<size_t>(std::max(f.length, 0)) : 0));
    serializedJson += std::string(i ? "," : "") + "{\"name\":" + jsonString(names.back()) +
                      ",\"type\":" + std::to_string(static_cast<int>(f.type)) +
                      ",\"length\":" + std::to_string(f.length);
    if (p != nullptr && f.length == 1 && (f.type == PluginFieldType::kINT32 || f.type == PluginFieldType::kINT64)) {
      int64_t v = 0;
      if (f.type == PluginFieldType::kINT64) std::memcpy(&v, p, 8);
      else { int32_t v32 = 0; std::memcpy(&v32, p, 4); v = v32; }
      serializedJson += ",\"value\":" + std::to_string(v);
    }
    serializedJson += "}";
  }
  for (int32_t i = 0; i < serialized->nbFields; ++i)
    copied.emplace_back(names[i].c_str(), blobs[i].data(), serialized->fields[i].type, serialized->fields[i].length);
  report.set("serialized_fields", serializedJson + "]");
  plugin.reset();
  report.pass("serialize");

  PluginFieldCollection fc2{static_cast<int32_t>(copied.size()), copied.data()};
  PluginPtr runtimePlugin(creator->createPlugin(o.op.c_str(), &fc2, TensorRTPhase::kRUNTIME));
  if (!runtimePlugin) return report.fail("create_runtime", "createPlugin(kRUNTIME) from the serialised fields failed");
  report.pass("create_runtime");

  auto* rt0 = static_cast<IPluginV3OneRuntime*>(runtimePlugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  HarnessResourceContext context;
  PluginPtr attached(rt0 ? rt0->attachToContext(&context) : nullptr);
  if (!attached) return report.fail("attach", "attachToContext returned null");
  auto* rt = static_cast<IPluginV3OneRuntime*>(attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  if (rt == nullptr) return report.fail("attach", "attached plugin has no runtime capability");
  report.pass("attach");

  std::vector<PluginTensorDesc> inDesc(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) {
    inDesc[i] = io[i].desc;
    inDesc[i].dims = o.inputs[i].dims;
    for (auto const& r : o.runtimeInputs)
      if (r.name == o.inputs[i].name) {
        inDesc[i].dims = r.dims;
        inDesc[i].type = r.type;
      }
  }
  PluginTensorDesc outDesc = io[nbInputs].desc;
  outDesc.dims = outActual;
  if (!o.runtimeInputs.empty()) {  // the output expressions at the runtime shapes, as TensorRT would size Y
    std::vector<int64_t> bind = actual;
    bool fits = true;
    for (size_t sy = 0; sy < bind.size(); ++sy) {
      Dims const& d = inDesc[symbolDims[sy].first].dims;
      fits = fits && symbolDims[sy].second < d.nbDims;
      if (fits) bind[sy] = d.d[symbolDims[sy].second];
    }
    if (fits && !evalOut(bind, outDesc.dims)) outDesc.dims = outActual;
  }
  if (o.runtimeOutputSet) {
    outDesc.dims = o.runtimeOutput.dims;
    outDesc.type = o.runtimeOutput.type;
  }
  report.set("runtime_output_shape", jsonDims(outDesc.dims));
  if (rt->onShapeChange(inDesc.data(), nbInputs, &outDesc, 1) != 0)
    return report.fail("shape_change", "onShapeChange returned an error");
  report.pass("shape_change");

  if (!o.enqueue) return true;
  return runEnqueue(o, rt, inDesc, outDesc, workspaceBytes, report);
}

int listCreators(IPluginCreatorInterface* const* creators, int32_t n) {
  std::string s = "{\"creators\":[";
  for (int32_t i = 0; i < n; ++i) {
    InterfaceInfo info = creators[i]->getInterfaceInfo();
    s += std::string(i ? "," : "") + "{\"kind\":" + jsonString(info.kind ? info.kind : "") +
         ",\"major\":" + std::to_string(info.major);
    if (info.kind && std::string(info.kind) == "PLUGIN CREATOR_V3ONE") {
      auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
      s += ",\"name\":" + jsonString(c->getPluginName()) + ",\"version\":" + jsonString(c->getPluginVersion()) +
           ",\"namespace\":" + jsonString(c->getPluginNamespace()) + ",\"fields\":[";
      PluginFieldCollection const* fc = c->getFieldNames();
      for (int32_t k = 0; fc && k < fc->nbFields; ++k)
        s += std::string(k ? "," : "") + "{\"name\":" + jsonString(fc->fields[k].name) +
             ",\"type\":" + std::to_string(static_cast<int>(fc->fields[k].type)) + "}";
      s += "]";
    }
    s += "}";
  }
  std::printf("%s]}\n", s.c_str());
  return 0;
}

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
