// One Bind* function per concept, each in its own file, all called by module.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace posenc::python {

void BindRope(pybind11::module_& m);       // rope_bindings.cc
void BindAbsolute(pybind11::module_& m);   // absolute_bindings.cc: sinusoidal, learned, embedding
void BindAlibi(pybind11::module_& m);      // alibi_bindings.cc
void BindAttention(pybind11::module_& m);  // attention_bindings.cc
void BindHfConfig(pybind11::module_& m);   // hf_config_bindings.cc
void BindRelativeBias(pybind11::module_& m);  // relative_bias_bindings.cc
void BindMRope(pybind11::module_& m);         // mrope_bindings.cc
void BindKvCache(pybind11::module_& m);       // kv_cache_bindings.cc
void BindKvCacheBatch(pybind11::module_& m);  // kv_cache_bindings.cc

}  // namespace posenc::python
