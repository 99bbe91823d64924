// The library's only exported symbols: what IPluginRegistry::loadLibrary and `trtexec --dynamicPlugins` look up.
// No REGISTER_TENSORRT_PLUGIN: registration happens when TensorRT loads the library and asks for the creators.
#include "fused_op_plugin.h"

// TENSORRTAPI exports only when building TensorRT itself; exports.map keeps these two and nothing else.
#define FUSEDOPS_TRT_EXPORT __attribute__((visibility("default")))

using fusedops::trt::FusedOpCreator;
using fusedops::trt::OpKind;

extern "C" FUSEDOPS_TRT_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  static FusedOpCreator sGroupNormAct(OpKind::kGroupNormAct);
  static FusedOpCreator sGemmGroupNormAct(OpKind::kGemmGroupNormAct);
  static nvinfer1::IPluginCreatorInterface* const kCreators[] = {&sGroupNormAct, &sGemmGroupNormAct};
  nbCreators = static_cast<int32_t>(sizeof(kCreators) / sizeof(kCreators[0]));
  return kCreators;
}

extern "C" FUSEDOPS_TRT_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  fusedops::trt::setLoggerFinder(finder);
}
