// ft_tests' main: doctest, plus a record of which cases ran and how each
// ended, so that ctest can prove every case ran exactly once.
//
// ctest runs one case per process (tests/support/discover_cases.cmake). A
// filter that matches nothing would pass in silence, so a process whose
// filters match no case fails. Each case that runs appends one line,
// "<passed|failed|skipped>\t<name>", to $FT_TEST_RECORD/<pid>; the last ctest
// entry, `ft_tests --verify-record=DIR`, holds those lines to the list of
// cases. A case that cannot run on this machine calls ft::test::skip (it
// then ends the process with 77, ctest's "skipped", where it ran alone).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "support/skip.hpp"

namespace {

// What this process ran, for its exit status.
struct Tally {
  int ran = 0, skipped = 0, failed = 0;
  bool current_skipped = false;
};
Tally tally;

// Every doctest hook a listener must define; only the case's start and end matter here.
struct Silent : doctest::IReporter {
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

// Counts every case that runs and, where FT_TEST_RECORD names a directory,
// writes its outcome there.
struct CaseRecord : Silent {
  explicit CaseRecord(const doctest::ContextOptions&) {}
  std::string name;

  void test_case_start(const doctest::TestCaseData& data) override {
    name = data.m_name;
    tally.current_skipped = false;
  }
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    const bool failed = !stats.testCaseSuccess;
    const bool skipped = !failed && tally.current_skipped;
    ++tally.ran;
    tally.failed += failed;
    tally.skipped += skipped;
    const char* dir = std::getenv("FT_TEST_RECORD");
    if (!dir || !*dir) return;
    std::filesystem::create_directories(dir);
    std::ofstream out(std::filesystem::path(dir) / std::to_string(::getpid()), std::ios::app);
    out << (failed ? "failed" : skipped ? "skipped" : "passed") << '\t' << name << '\n';
  }
};
REGISTER_LISTENER("ft-case-record", 1, CaseRecord);

// Collects the names of the cases that pass the filters (with --list-test-cases).
std::vector<std::string> listed;
struct Names : Silent {
  explicit Names(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData& query) override {
    for (unsigned i = 0; i < query.num_data; ++i) listed.emplace_back(query.data[i]->m_name);
  }
};
REGISTER_REPORTER("ft-names", 1, Names);

std::vector<std::string> list_cases() {
  const char* argv[] = {"ft_tests", "--list-test-cases", "--reporters=ft-names", "--no-version"};
  doctest::Context context(4, argv);
  context.run();
  return listed;
}

// Holds the record in `dir` to the list of cases: each ran exactly once.
int verify_record(const std::filesystem::path& dir) {
  std::map<std::string, std::vector<std::string>> outcomes;  // name -> one outcome per run
  if (std::filesystem::is_directory(dir))
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(file.path());
      for (std::string line; std::getline(in, line);) {
        const auto tab = line.find('\t');
        if (tab == std::string::npos) continue;
        outcomes[line.substr(tab + 1)].push_back(line.substr(0, tab));
      }
    }
  const std::vector<std::string> cases = list_cases();
  std::map<std::string, int> count;
  int problems = 0;
  for (const std::string& name : cases) {
    const auto it = outcomes.find(name);
    if (it == outcomes.end()) {
      std::printf("never ran (or never finished): %s\n", name.c_str());
      ++problems;
      continue;
    }
    if (it->second.size() > 1) {
      std::printf("ran %zu times: %s\n", it->second.size(), name.c_str());
      ++problems;
    }
    for (const std::string& outcome : it->second) ++count[outcome];
    outcomes.erase(it);
  }
  for (const auto& [name, runs] : outcomes) {
    std::printf("ran but is not a listed case: %s\n", name.c_str());
    ++problems;
  }
  std::printf("%zu cases listed; %d passed, %d skipped, %d failed; %d problem(s) with the record in %s\n",
              cases.size(), count["passed"], count["skipped"], count["failed"], problems, dir.c_str());
  return problems == 0 ? 0 : 1;
}

}  // namespace

void ft::test::skip(const std::string& why) {
  tally.current_skipped = true;
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  constexpr const char* verify = "--verify-record=";
  if (argc == 2 && std::strncmp(argv[1], verify, std::strlen(verify)) == 0)
    return verify_record(argv[1] + std::strlen(verify));

  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  if (tally.ran == 0) {
    std::fprintf(stderr, "ft_tests: no test case matches the filters\n");
    return 1;
  }
  return tally.skipped == tally.ran ? 77 : 0;
}
