#pragma once
// Loading one of halfgrad's optional backend libraries (the CUDA backend, the MPI backend) with dlopen():
// they are found next to libhalfgrad (the build folder, or lib/ of an install) unless an environment
// variable names another file. The library's one exported function returns its table.
#include <string>

namespace hg {

struct Plugin {
  void* entry = nullptr;  // the exported function, or nullptr when the library could not be loaded
  std::string path;       // the file tried
  std::string error;      // dlerror()'s words when entry is nullptr
};

// Opens file_name (a soname such as "libhalfgrad_mpi.so.0") from libhalfgrad's folder, or the path in env_var
// when that is set and not empty, with RTLD_NOW | RTLD_LOCAL (its dependencies' symbols stay out of the
// program's namespace), and looks up entry_symbol. Never unloaded: the backend's code stays referenced.
Plugin load_plugin(const char* file_name, const char* env_var, const char* entry_symbol);

}  // namespace hg
