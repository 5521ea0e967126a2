// A case that cannot run on this machine says why and returns at once:
//
//   if (!have_slurm) return ft::test::skip("a Slurm cluster cannot be started here");
//
// ctest then shows it as skipped rather than passed, and the record of the run
// counts it apart from the passes (tests/main.cpp).
#pragma once

#include <string>

namespace ft::test {

void skip(const std::string& why);

}  // namespace ft::test
