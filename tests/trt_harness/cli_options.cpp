// fusedops_trt_harness: command-line parsing (usage: the comment at the top of main.cpp).
#include "harness.h"

namespace fusedops_harness {


[[noreturn]] void usage(std::string const& msg) {
  std::fprintf(stderr, "fusedops_trt_harness: %s\n(see the comment at the top of main.cpp for usage)\n",
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


}  // namespace fusedops_harness
