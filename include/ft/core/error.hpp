#pragma once
// ft reports every problem a user can fix as an ft::Error whose message is one
// line: where the problem is, what it is, and what would be accepted instead.
// Programming errors inside ft are not Errors; they are assertions.
#include <stdexcept>
#include <string>

namespace ft {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

}  // namespace ft
