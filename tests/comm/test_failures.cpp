// A peer that dies or hangs ends every rank of the job with one line naming
// it, within the collective timeout: real mpirun jobs of tests/comm/mpi_check.cpp.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/files.hpp"

namespace test_failures {

namespace {

namespace fs = std::filesystem;

struct Job {
  int code;
  std::string err;
  double seconds;
};

Job run_scenario(const std::string& name) {
  const fs::path err = fs::temp_directory_path() / ("ft_comm_" + std::to_string(::getpid()) + "_" + name);
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " FT_MPIRUN
                          " -np 2 --oversubscribe --bind-to none " FT_MPI_CHECK_PATH " --scenario " + name +
                          " >/dev/null 2>" + err.string();
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Job job{WIFEXITED(status) ? WEXITSTATUS(status) : -1, ft::testing::read_bytes(err), seconds};
  fs::remove(err);
  return job;
}

}  // namespace

TEST_CASE("a rank that hangs outside a collective stops the job after the timeout, named by the rank that waited") {
  const Job job = run_scenario("hang");
  CHECK(job.code != 0);
  CHECK(job.seconds < 20);  // the hanging rank would sleep 30 s; the timeout is 2 s
  INFO(job.err);
  CHECK(job.err.find("ftrun: rank 0 (pid ") != std::string::npos);
  CHECK(job.err.find("all-reduce of gradients of layers.0 (step 3) did not complete within 2 s") != std::string::npos);
  CHECK(job.err.find("rank 1 (pid ") != std::string::npos);
  CHECK(job.err.find("has not reached it: it computes (step 3)") != std::string::npos);
}

TEST_CASE("a rank killed with SIGKILL stops the job, and the survivor names it as dead") {
  const Job job = run_scenario("die");
  CHECK(job.code != 0);
  CHECK(job.seconds < 20);
  INFO(job.err);
  CHECK(job.err.find("ftrun: rank 0 (pid ") != std::string::npos);
  CHECK(job.err.find("gradients of layers.0 (step 3)") != std::string::npos);
  CHECK(job.err.find("rank 1 (pid ") != std::string::npos);
  CHECK(job.err.find("has died") != std::string::npos);
}

}  // namespace test_failures
