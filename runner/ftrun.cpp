// ftrun: the ft runtime. A thin command line over the library and its
// plugins; each command declares its own options (commands.hpp).
#include <iostream>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <ft/version.hpp>

#include "commands.hpp"
#include "exit_code.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ftrun: fine-tune large language models from TOML recipes", "ftrun"};
  app.set_version_flag("--version", "ftrun " FT_VERSION_STRING);
  app.require_subcommand(1);
  // Listed by what a user is doing: training, inspecting and converting
  // models, answering with them, operating jobs, benchmarking.
  const std::vector<std::pair<const char*, std::vector<ftrun::Command>>> groups{
      {"Train", {ftrun::add_train_command(app), ftrun::add_prepare_command(app), ftrun::add_estimate_command(app),
                 ftrun::add_schedule_command(app), ftrun::add_recipe_command(app)}},
      {"Inspect and convert", {ftrun::add_plugins_command(app), ftrun::add_eval_command(app), ftrun::add_convert_command(app),
                  ftrun::add_init_command(app)}},
      {"Serve", {ftrun::add_generate_command(app), ftrun::add_chat_command(app), ftrun::add_serve_command(app)}},
      {"Operate", {ftrun::add_control_command(app), ftrun::add_dashboard_command(app)}},
      {"Benchmark", {ftrun::add_bench_command(app)}}};
  std::vector<ftrun::Command> commands;
  for (const auto& [group, members] : groups)
    for (const ftrun::Command& command : members) {
      command.app->group(group);
      commands.push_back(command);
    }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ftrun: " << e.what() << " (see ftrun --help)\n";
    return ftrun::bad_input;
  }

  for (const ftrun::Command& command : commands)
    if (*command.app) return command.run();
  return ftrun::bad_input;
}
