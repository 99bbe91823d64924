# The CUTLASS sm_90a kernels (included by plugins/CMakeLists.txt inside its CUDA section, after fusedops_cuda).
# Sets FUSEDOPS_HAVE_CUTLASS and, when ON, appends fusedops_cutlass to FUSEDOPS_KERNEL_LIBS. Needs nvcc >= 12.4
# (sm_90a wgmma/TMA as CUTLASS 4 uses them), "90" among FUSEDOPS_CUDA_ARCHS and the CUTLASS headers:
# CUTLASS_INCLUDE_DIR, else third_party/cutlass/include (scripts/get_cutlass.sh), else the nvidia-cutlass wheel
# installed in the Python that configures (pip install -e ".[cutlass]").
set(_cutlass_dir ${FUSEDOPS_ROOT}/csrc/cuda/cutlass)
set(FUSEDOPS_HAVE_CUTLASS OFF)
set(_cutlass_why "")
if(FUSEDOPS_CUTLASS STREQUAL "OFF")
  set(_cutlass_why "FUSEDOPS_CUTLASS=OFF")
elseif(NOT FUSEDOPS_CUDA_ARCHS MATCHES "90")
  set(_cutlass_why "sm_90 is not among FUSEDOPS_CUDA_ARCHS (${FUSEDOPS_CUDA_ARCHS})")
elseif(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.4)
  set(_cutlass_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION} is older than 12.4")
else()
  if(NOT CUTLASS_INCLUDE_DIR AND EXISTS ${FUSEDOPS_THIRD_PARTY}/cutlass/include/cutlass/cutlass.h)
    set(CUTLASS_INCLUDE_DIR ${FUSEDOPS_THIRD_PARTY}/cutlass/include)
  endif()
  if(NOT CUTLASS_INCLUDE_DIR)
    find_package(Python3 QUIET COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      # find_spec locates the package without importing it (its __init__ imports cuda-python and friends).
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c
                "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include') if s else '')"
        OUTPUT_VARIABLE _cutlass_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_cutlass_py AND EXISTS ${_cutlass_py}/cutlass/cutlass.h)
        set(CUTLASS_INCLUDE_DIR ${_cutlass_py})
      endif()
    endif()
  endif()
  if(CUTLASS_INCLUDE_DIR AND EXISTS ${CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h)
    set(FUSEDOPS_HAVE_CUTLASS ON)
  else()
    set(_cutlass_why "CUTLASS headers not found (scripts/get_cutlass.sh, or -DCUTLASS_INCLUDE_DIR)")
  endif()
endif()

if(FUSEDOPS_HAVE_CUTLASS)
  message(STATUS "fusedops: CUTLASS sm_90a kernels from ${CUTLASS_INCLUDE_DIR}")
  file(GLOB _cutlass_kernels CONFIGURE_DEPENDS ${_cutlass_dir}/kernel_*.cu)
  add_library(fusedops_cutlass STATIC ${_cutlass_kernels} ${_cutlass_dir}/kernel_registry.cu
                                      ${_cutlass_dir}/fused_gemm_plan.cu)
  # sm_90a only (wgmma and TMA are arch-specific features); the planner runs these kernels on compute capability
  # 9.0 devices only.
  set_target_properties(fusedops_cutlass PROPERTIES CUDA_ARCHITECTURES OFF)
  target_compile_options(fusedops_cutlass PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo>)
  # The kernels must contain no function call: ptxas serialises the wgmma pipeline of a kernel that has one, and
  # IEEE division (the chain steps' x / v) calls a slow-path subroutine. So the chains divide with div.full.f32
  # (at most 2 ulp) in these files; every other kernel keeps IEEE division.
  set_source_files_properties(${_cutlass_kernels} PROPERTIES COMPILE_OPTIONS "-prec-div=false")
  # ptxas's register / spill report and its "wgmma ... serialized" (C7510) warning, for the device script's log.
  option(FUSEDOPS_CUTLASS_PTXAS_VERBOSE "Print ptxas resource usage of the CUTLASS kernels" OFF)
  if(FUSEDOPS_CUTLASS_PTXAS_VERBOSE)
    target_compile_options(fusedops_cutlass PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
  target_include_directories(fusedops_cutlass PRIVATE ${FUSEDOPS_ROOT}/include ${FUSEDOPS_ROOT}/csrc)
  target_include_directories(fusedops_cutlass SYSTEM PRIVATE ${CUTLASS_INCLUDE_DIR})
  target_compile_definitions(fusedops_cutlass PRIVATE FUSEDOPS_BUILDING=1)
  target_link_libraries(fusedops_cutlass PUBLIC fusedops_core CUDA::cudart_static)
  target_sources(fusedops_cuda PRIVATE ${_cutlass_dir}/gemm_select.cpp)
  target_link_libraries(fusedops_cuda PUBLIC fusedops_cutlass)
  set_source_files_properties(${FUSEDOPS_GEMM_CHOICE} PROPERTIES COMPILE_DEFINITIONS FUSEDOPS_WITH_CUTLASS=1)
  set(FUSEDOPS_KERNEL_LIBS fusedops_cuda fusedops_cutlass fusedops_core)
else()
  message(STATUS "fusedops: CUTLASS kernels not built (${_cutlass_why}); GemmGroupNormAct runs cuBLASLt + epilogue")
  target_sources(fusedops_cuda PRIVATE ${_cutlass_dir}/gemm_select.cpp ${_cutlass_dir}/fused_gemm_stub.cpp)
endif()
