#pragma once
// ftrun's exit codes, stable for scripts.
namespace ftrun {
enum ExitCode : int {
  ok = 0,
  failed = 1,          // the work itself failed
  bad_input = 2,       // a recipe, command line, model directory or combination is wrong
  plugin_refused = 3,  // a plugin named or found could not be used
  out_of_memory = 4,   // the run needed more memory than it had, or its estimate does not fit
};
}  // namespace ftrun
