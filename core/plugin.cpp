// See core/plugin.h.
#include "core/plugin.h"

#include <dlfcn.h>

#include <cstdlib>

namespace hg {

Plugin load_plugin(const char* file_name, const char* env_var, const char* entry_symbol) {
  Plugin p;
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') {
    p.path = env;
  } else {
    // dladdr of a function of this library names the file it was loaded from
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&load_plugin), &info) != 0 && info.dli_fname != nullptr) {
      const std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      p.path = (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) + file_name;
    } else {
      p.path = file_name;  // the dynamic loader's own search path decides
    }
  }
  void* lib = dlopen(p.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    p.error = why != nullptr ? why : "dlopen failed";
    return p;
  }
  p.entry = dlsym(lib, entry_symbol);
  if (p.entry == nullptr) p.error = std::string("no symbol ") + entry_symbol;
  return p;
}

}  // namespace hg
