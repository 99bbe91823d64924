// The C ABI shared library (libfusedops.so): every symbol comes from the kernel archives linked whole;
// this file only gives the library a translation unit of its own.
#include "fusedops/fusedops.h"
