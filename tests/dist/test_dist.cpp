// hg::dist without launching ranks: what a program gets before init_process_group, with bad options, and when
// the MPI backend cannot be loaded. The collectives themselves run across real ranks in dist_collectives.cpp.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "cuda/api/backend.h"
#include "dist/api/backend.h"
#include "dist/dist.h"
#include "test_util.h"

using namespace hg;
using Catch::Matchers::Contains;

TEST_CASE("dist: collectives before init_process_group name the call to make first", "[dist]") {
  REQUIRE_FALSE(dist::is_initialized());
  Tensor t = zeros({3});
  CHECK_THROWS_WITH(dist::all_reduce(t), Contains("not initialized") && Contains("init_process_group"));
  CHECK_THROWS_WITH(dist::barrier(), Contains("dist.barrier") && Contains("not initialized"));
  CHECK_THROWS_WITH(dist::get_rank(), Contains("not initialized"));
  CHECK_THROWS_WITH(dist::destroy_process_group(), Contains("not initialized"));
}

TEST_CASE("dist: init_process_group refuses bad options and says why the backend is missing", "[dist]") {
  CHECK_THROWS_WITH(dist::init_process_group({.backend = "nccl"}), Contains("'nccl'") && Contains("\"mpi\""));
  CHECK_THROWS_WITH(dist::init_process_group({.timeout = std::chrono::milliseconds(0)}), Contains("must be positive"));
  CHECK_THROWS_WITH(dist::init_process_group({.device_backend = "gloo"}),
                    Contains("device_backend 'gloo'") && Contains("\"auto\", \"nccl\" or \"mpi\""));
  // a backend file that is not there: the error names it and the fix (or, in a build without MPI, the rebuild)
  setenv("HG_MPI_LIBRARY", "/nonexistent/libhalfgrad_mpi.so.0", 1);
  CHECK_THROWS_WITH(dist::init_process_group(),
                    Contains("init_process_group") && (Contains("could not be loaded") || Contains("without the MPI")));
  unsetenv("HG_MPI_LIBRARY");
  CHECK_FALSE(dist::is_initialized());
}

// NCCL is opened at run time by the CUDA backend (cuda/nccl.cpp), without a GPU too: where libnccl.so.2 is installed
// (the CUDA toolkit's here, PyPI's nvidia-nccl-cu13) its functions are found by name, its version read and a unique
// id made (what rank 0 broadcasts), which proves the declarations of cuda/nccl_api.h against the real library;
// elsewhere the reason names the fix. A build without the CUDA backend says that instead.
TEST_CASE("dist: NCCL is loaded at run time, its version read, without a GPU", "[dist]") {
  const cuda::BackendApi* api = nullptr;
  try {
    api = &cuda::backend_api();
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("CUDA backend") || Contains("could not be loaded"));
    return;
  }
  const dist::DeviceBackendApi* nccl = api->nccl();
  REQUIRE(nccl != nullptr);
  const std::string why = nccl->available();
  if (!why.empty()) {
    CHECK_THAT(why, Contains("HG_NCCL_LIBRARY"));
    return;
  }
  const std::string version = nccl->version();
  INFO(version);
  CHECK((version.rfind("NCCL 2.", 0) == 0 || version.find("stand-in") != std::string::npos));
  std::string error;
  CHECK(nccl->unique_id(&error).size() == 128);
  CHECK(error.empty());
}
