// The suite's own proof that every case runs under ctest (tests/main.cpp):
// a process whose filters match nothing fails, and the record check names
// each case that never ran, ran twice, or is not a case.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/files.hpp"

namespace test_case_record {

namespace fs = std::filesystem;
using ft::testing::run_command;
using ft::testing::TempDir;

// This binary, run without recording into the record of the ctest run it belongs to.
const std::string self = "env -u FT_TEST_RECORD " + fs::read_symlink("/proc/self/exe").string();

std::vector<std::string> listed_cases(const fs::path& dir) {
  const auto listing = run_command(self + " --list-test-cases --no-version", dir, "list");
  REQUIRE(listing.code == 0);
  std::vector<std::string> names;
  std::istringstream in(listing.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.rfind("[doctest] ", 0) != 0 && line.find_first_not_of('=') != std::string::npos)
      names.push_back(line);
  return names;
}

TEST_CASE("ft_tests fails where its filters match no case") {
  TempDir dir("case_record");
  const auto r = run_command(self + " '--test-case=no case is named this'", dir.path);
  CHECK(r.code == 1);
  CHECK(r.err == "ft_tests: no test case matches the filters\n");
}

TEST_CASE("the record check names a case that never ran, one that ran twice, and one that is not a case") {
  TempDir dir("case_record");
  const std::vector<std::string> names = listed_cases(dir.path);
  REQUIRE(names.size() > 2);
  const fs::path record = dir / "record";
  fs::create_directories(record);
  {
    std::ofstream a(record / "100"), b(record / "200");
    for (std::size_t i = 1; i < names.size(); ++i) a << "passed\t" << names[i] << '\n';
    b << "failed\t" << names[1] << "\npassed\tnot a case\n";
  }
  auto r = run_command(self + " --verify-record=" + record.string(), dir.path, "broken");
  CHECK(r.code == 1);
  CHECK(r.out.find("never ran (or never finished): " + names[0] + "\n") != std::string::npos);
  CHECK(r.out.find("ran 2 times: " + names[1] + "\n") != std::string::npos);
  CHECK(r.out.find("ran but is not a listed case: not a case\n") != std::string::npos);
  CHECK(r.out.find(std::to_string(names.size()) + " cases listed; " + std::to_string(names.size() - 1) +
                   " passed, 0 skipped, 1 failed; 3 problem(s)") != std::string::npos);

  fs::remove_all(record);
  fs::create_directories(record);
  {
    std::ofstream a(record / "100");
    a << "skipped\t" << names[0] << '\n';
    for (std::size_t i = 1; i < names.size(); ++i) a << "passed\t" << names[i] << '\n';
  }
  r = run_command(self + " --verify-record=" + record.string(), dir.path, "whole");
  CHECK(r.code == 0);
  CHECK(r.out.rfind(std::to_string(names.size()) + " cases listed; " + std::to_string(names.size() - 1) +
                        " passed, 1 skipped, 0 failed; 0 problem(s)",
                    0) == 0);
}

}  // namespace test_case_record
