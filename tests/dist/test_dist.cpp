// hg::dist without launching ranks: what a program gets before init_process_group, with bad options, and when
// the MPI backend cannot be loaded. The collectives themselves run across real ranks in dist_collectives.cpp.
#include <catch2/catch.hpp>
#include <cstdlib>

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
  // a backend file that is not there: the error names it and the fix (or, in a build without MPI, the rebuild)
  setenv("HG_MPI_LIBRARY", "/nonexistent/libhalfgrad_mpi.so.0", 1);
  CHECK_THROWS_WITH(dist::init_process_group(),
                    Contains("init_process_group") && (Contains("could not be loaded") || Contains("without the MPI")));
  unsetenv("HG_MPI_LIBRARY");
  CHECK_FALSE(dist::is_initialized());
}
