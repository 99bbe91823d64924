// The part of Triton Inference Server's C API (tritonserver.h 1.34, tritonbackend.h 1.19, BSD-licensed, public) that
// the fusedops backend calls, declared here from the documented ABI: the headers ship with Triton's source and
// containers, not with any package this project can depend on. The functions live in libtritonserver, which the
// tritonserver process has loaded when it dlopens a backend, so the backend links none of it. The enum values and
// signatures must stay those of the server that loads the backend; TRITONBACKEND_Initialize checks the version.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

#define FUSEDOPS_TRITONBACKEND_API_MAJOR 1
#define FUSEDOPS_TRITONBACKEND_API_MINOR 19

struct TRITONSERVER_Error;
struct TRITONSERVER_Message;
struct TRITONBACKEND_Backend;
struct TRITONBACKEND_Model;
struct TRITONBACKEND_ModelInstance;
struct TRITONBACKEND_Request;
struct TRITONBACKEND_Input;
struct TRITONBACKEND_Response;
struct TRITONBACKEND_Output;

typedef enum {
  TRITONSERVER_TYPE_INVALID,
  TRITONSERVER_TYPE_BOOL,
  TRITONSERVER_TYPE_UINT8,
  TRITONSERVER_TYPE_UINT16,
  TRITONSERVER_TYPE_UINT32,
  TRITONSERVER_TYPE_UINT64,
  TRITONSERVER_TYPE_INT8,
  TRITONSERVER_TYPE_INT16,
  TRITONSERVER_TYPE_INT32,
  TRITONSERVER_TYPE_INT64,
  TRITONSERVER_TYPE_FP16,
  TRITONSERVER_TYPE_FP32,
  TRITONSERVER_TYPE_FP64,
  TRITONSERVER_TYPE_BYTES,
  TRITONSERVER_TYPE_BF16
} TRITONSERVER_DataType;

typedef enum {
  TRITONSERVER_MEMORY_CPU,
  TRITONSERVER_MEMORY_CPU_PINNED,
  TRITONSERVER_MEMORY_GPU
} TRITONSERVER_MemoryType;

typedef enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO,
  TRITONSERVER_INSTANCEGROUPKIND_CPU,
  TRITONSERVER_INSTANCEGROUPKIND_GPU,
  TRITONSERVER_INSTANCEGROUPKIND_MODEL
} TRITONSERVER_InstanceGroupKind;

typedef enum { TRITONSERVER_LOG_INFO, TRITONSERVER_LOG_WARN, TRITONSERVER_LOG_ERROR, TRITONSERVER_LOG_VERBOSE }
    TRITONSERVER_LogLevel;

typedef enum {
  TRITONSERVER_ERROR_UNKNOWN,
  TRITONSERVER_ERROR_INTERNAL,
  TRITONSERVER_ERROR_NOT_FOUND,
  TRITONSERVER_ERROR_INVALID_ARG,
  TRITONSERVER_ERROR_UNAVAILABLE,
  TRITONSERVER_ERROR_UNSUPPORTED,
  TRITONSERVER_ERROR_ALREADY_EXISTS,
  TRITONSERVER_ERROR_CANCELLED
} TRITONSERVER_Error_Code;

typedef enum { TRITONBACKEND_ARTIFACT_FILESYSTEM } TRITONBACKEND_ArtifactType;

enum { TRITONSERVER_REQUEST_RELEASE_ALL = 1 };
enum { TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1 };

TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);
TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename, const int line,
                                            const char* msg);

TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name);
TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version);
TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* type,
                                                  const char** location);
TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);
TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance,
                                                     TRITONBACKEND_Model** model);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* instance,
                                                    TRITONSERVER_InstanceGroupKind* kind);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance, int32_t* device_id);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* instance,
                                                                TRITONBACKEND_Request* request, const bool success,
                                                                const uint64_t exec_start_ns,
                                                                const uint64_t compute_start_ns,
                                                                const uint64_t compute_end_ns,
                                                                const uint64_t exec_end_ns);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance* instance,
                                                                     const uint64_t batch_size,
                                                                     const uint64_t exec_start_ns,
                                                                     const uint64_t compute_start_ns,
                                                                     const uint64_t compute_end_ns,
                                                                     const uint64_t exec_end_ns);

TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name,
                                               TRITONBACKEND_Input** input);
TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name,
                                                  TRITONSERVER_DataType* datatype, const int64_t** shape,
                                                  uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
                                              uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type,
                                              int64_t* memory_type_id);
TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags);

TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response, TRITONBACKEND_Output** output,
                                                 const char* name, const TRITONSERVER_DataType datatype,
                                                 const int64_t* shape, const uint32_t dims_count);
TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer,
                                               const uint64_t buffer_byte_size, TRITONSERVER_MemoryType* memory_type,
                                               int64_t* memory_type_id);
TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, const uint32_t send_flags,
                                               TRITONSERVER_Error* error);

}  // extern "C"
