#pragma once
// The ftrun commands. Each source declares its own options and adds its
// subcommand to ftrun's command line (command_line.hpp); running one
// returns an exit code (exit_code.hpp) and prints its errors as one line on
// stderr. ftrun.cpp lists them in `ftrun --help`'s groups.
#include "command_line.hpp"

namespace ftrun {

Command add_plugins_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_prepare_command(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_init_command(CLI::App& app);
Command add_control_command(CLI::App& app);
Command add_dashboard_command(CLI::App& app);
Command add_recipe_command(CLI::App& app);

}  // namespace ftrun
