# The hand-written sm_90a kernels (wgmma): ConvTransposeGroupNormAct's convolution (convt_wgmma.cu). Included by
# plugins/CMakeLists.txt inside its CUDA section, after cutlass.cmake. Built when "90" is among FUSEDOPS_CUDA_ARCHS;
# otherwise convt_wgmma_stub.cu answers "not built" and plans keep the mma.sync kernel.
set(_sm90_dir ${FUSEDOPS_ROOT}/csrc/cuda/sm90)
if(FUSEDOPS_CUDA_ARCHS MATCHES "90")
  add_library(fusedops_sm90 STATIC ${_sm90_dir}/convt_wgmma.cu)
  # sm_90a only: wgmma is an arch-specific feature; plans run the kernel on compute capability 9.0 devices only.
  set_target_properties(fusedops_sm90 PROPERTIES CUDA_ARCHITECTURES OFF)
  # -prec-div=false: no IEEE-division subroutine in the chain steps (a call would serialise the wgmma pipeline).
  target_compile_options(fusedops_sm90 PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -prec-div=false>)
  target_include_directories(fusedops_sm90 PRIVATE ${FUSEDOPS_ROOT}/include ${FUSEDOPS_ROOT}/csrc)
  target_compile_definitions(fusedops_sm90 PRIVATE FUSEDOPS_BUILDING=1)
  target_link_libraries(fusedops_sm90 PUBLIC CUDA::cudart_static)
  target_link_libraries(fusedops_cuda PUBLIC fusedops_sm90)
  list(INSERT FUSEDOPS_KERNEL_LIBS 1 fusedops_sm90)
  message(STATUS "fusedops: sm_90a wgmma kernels built")
else()
  target_sources(fusedops_cuda PRIVATE ${_sm90_dir}/convt_wgmma_stub.cu)
endif()
