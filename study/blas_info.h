// Which BLAS library libtorch is running on. Debian's libtorch calls the system BLAS
// (libblas.so.3, chosen by update-alternatives); the reference BLAS makes training several times
// slower than OpenBLAS, so the study says which one it got.
#pragma once

#include <string>

namespace posenc::study {

// The resolved path of the loaded libblas.so.3 (or any loaded library named *blas*), or "" when
// none is loaded.
std::string LoadedBlasLibrary();

// "OpenBLAS, <core> kernels (<path>)" or "reference BLAS (<path>): install libopenblas0-pthread" and so on.
std::string DescribeBlas();

// Keeps OpenBLAS (when it is the BLAS) to one thread: libtorch already runs its own threads
// around BLAS calls, and OpenBLAS threads inside them oversubscribe the cores (training ran
// twice as fast on 2 cores with one BLAS thread). Returns false when the BLAS has no such knob.
bool UseSingleThreadedBlas();

// OpenBLAS picks its kernels by CPU model at load time; a release older than the CPU (Debian 12's
// 0.3.21 on Emerald Rapids or Zen 5) does not know the model and falls back to its SSE3
// "Prescott" kernels, which made the study's training step 2.6x slower on an Emerald Rapids
// Xeon. When the loaded OpenBLAS runs Prescott kernels on a CPU with AVX2 or AVX-512 and
// OPENBLAS_CORETYPE is not set, this sets it to the widest kernels the CPU runs ("SkylakeX" or
// "Haswell") and restarts the program with the same arguments (OpenBLAS reads the variable only
// when it loads), saying so on stderr. Call it first in main, before any thread or MPI starts.
// Returns only when no restart is needed; a failed restart is reported and the program goes on.
void RestartWithOpenBlasKernelsForThisCpu(char** argv);

}  // namespace posenc::study
