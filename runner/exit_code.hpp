#pragma once
// ftrun's exit codes, stable for scripts.
#include <exception>
#include <iostream>

#include <ft/core/error.hpp>

namespace ftrun {
enum ExitCode : int {
  ok = 0,
  failed = 1,          // the work itself failed
  bad_input = 2,       // a recipe, command line, model directory or combination is wrong
  plugin_refused = 3,  // a plugin named or found could not be used
  out_of_memory = 4,   // the run needed more memory than it had, or its estimate does not fit
  stopped = 5,         // a signal stopped training after it saved a checkpoint; resume = "auto" continues
};

// A command's work, whose failure becomes one line on stderr and its exit
// code: out of memory, bad input (ft::Error), or anything else the device or
// a plugin threw.
template <class Work>
int exit_code_of(Work&& work) {
  try {
    return work();
  } catch (const ft::OutOfMemory& e) {
    std::cerr << "ftrun: out of memory: " << e.what() << "\n";
    return out_of_memory;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  } catch (const std::exception& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return failed;
  }
}
}  // namespace ftrun
