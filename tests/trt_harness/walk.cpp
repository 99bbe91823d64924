// fusedops_trt_harness: one op through every call TensorRT makes, build phase then runtime phase.
#include "expr_builder.h"
#include "harness.h"

namespace fusedops_harness {

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


}  // namespace fusedops_harness
