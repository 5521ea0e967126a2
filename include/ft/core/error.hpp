#pragma once
// ft reports every problem a user can fix as an ft::Error whose message is one
// line: where the problem is, what it is, and what would be accepted instead.
// Programming errors inside ft are not Errors; they are assertions.
#include <cstddef>
#include <stdexcept>
#include <string>

namespace ft {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// An allocation that failed: its own kind, because a run that ran out of
// memory is an outcome to report (and to plan around), not a defect.
class OutOfMemory : public Error {
public:
  OutOfMemory(const std::string& what, std::size_t bytes) : Error(what), bytes_(bytes) {}
  std::size_t bytes() const { return bytes_; }

private:
  std::size_t bytes_;
};

}  // namespace ft
