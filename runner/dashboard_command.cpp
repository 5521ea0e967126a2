// ftrun dashboard RUN_DIR...: the live dashboard (dashboard/dashboard_server.hpp)
// over runs' output directories, until Ctrl-C. `ftrun train --dashboard PORT`
// serves the same page over its own run.
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ft/core/error.hpp>

#include "commands.hpp"
#include "dashboard/dashboard_server.hpp"
#include "exit_code.hpp"

namespace ftrun {

namespace {

struct DashboardOptions {
  std::vector<std::string> runs;
  std::string host = "127.0.0.1";
  int port = 8050;
};

int run_dashboard(const DashboardOptions& o) {
  std::vector<std::filesystem::path> dirs;
  for (const std::string& run : o.runs) {
    std::error_code ec;
    if (std::filesystem::exists(run, ec) && !std::filesystem::is_directory(run, ec)) {
      std::cerr << "ftrun dashboard: " << run << ": not a directory (a recipe's output_dir)\n";
      return bad_input;
    }
    if (!std::filesystem::exists(run / std::filesystem::path("metrics.jsonl"), ec))
      std::cerr << "ftrun dashboard: " << run << ": no run there yet; its curves appear once one writes there\n";
    dirs.emplace_back(run);
  }
  // Blocked before the server's threads start, so that only sigwait below takes them.
  sigset_t stopping;
  sigemptyset(&stopping);
  for (int s : {SIGINT, SIGTERM}) sigaddset(&stopping, s);
  ::pthread_sigmask(SIG_BLOCK, &stopping, nullptr);
  try {
    const Dashboard dashboard(dirs, o.host, o.port);
    std::cout << "ftrun dashboard: " << dashboard.url() << " (" << dirs.size() << " run(s); Ctrl-C stops it)"
              << std::endl;
    int signal = 0;
    ::sigwait(&stopping, &signal);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun dashboard: " << e.what() << "\n";
    return failed;
  }
  return ok;
}

}  // namespace

Command add_dashboard_command(CLI::App& app) {
  auto o = std::make_shared<DashboardOptions>();
  CLI::App* command = app.add_subcommand(
      "dashboard", "Serve a live web page of runs' loss, learning rate, speed, memory and traffic, with stop/save");
  command->add_option("runs", o->runs, "Run directories (a recipe's output_dir); several are overlaid")->required();
  command->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  command->add_option("--port", o->port, "Port to listen on (0: a free one)")->capture_default_str();
  return {command, [o] { return run_dashboard(*o); }};
}

}  // namespace ftrun
