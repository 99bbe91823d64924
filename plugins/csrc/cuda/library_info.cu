// Build information of the CUDA build (fusedops_version lives in the core, identical for every build).
#include "fusedops/fusedops.h"

extern "C" FUSEDOPS_API int fusedops_has_cuda(void) { return 1; }
