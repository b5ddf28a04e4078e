// Which BLAS library libtorch is running on. Debian's libtorch calls the system BLAS
// (libblas.so.3, chosen by update-alternatives); the reference BLAS makes training several times
// slower than OpenBLAS, so the study says which one it got.
#pragma once

#include <string>

namespace posenc::study {

// The resolved path of the loaded libblas.so.3 (or any loaded library named *blas*), or "" when
// none is loaded.
std::string LoadedBlasLibrary();

// "OpenBLAS (<path>)" or "reference BLAS (<path>): install libopenblas0-pthread" and so on.
std::string DescribeBlas();

// Keeps OpenBLAS (when it is the BLAS) to one thread: libtorch already runs its own threads
// around BLAS calls, and OpenBLAS threads inside them oversubscribe the cores (training ran
// twice as fast on 2 cores with one BLAS thread). Returns false when the BLAS has no such knob.
bool UseSingleThreadedBlas();

}  // namespace posenc::study
