// ftrun train: resolve a recipe to one Trainer combination offered by a
// plugin, check it there, and train (or print the plan). A recipe with
// launch.nproc > 1 run outside a job starts the job: ftrun starts mpirun,
// which starts nproc copies of this same command line, and forwards an
// operator's stop to it.
#include <netdb.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include <ft/comm/job.hpp>
#include <ft/core/signals.hpp>
#include <ft/estimate/memory_estimate.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>
#include <ft/stock.hpp>

#include "commands.hpp"
#include "control/job_registry.hpp"
#include "control/run_progress.hpp"
#include "dashboard/dashboard_server.hpp"
#include "exit_code.hpp"
#include "hostfile.hpp"
#include "memory_fit.hpp"
#include "plugin_search.hpp"

namespace ftrun {

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> sets;     // --set section.key=value
  std::vector<std::string> plugins;  // --plugin FILE
  bool dry_run = false;
  int dashboard = -1;  // --dashboard PORT: serve the run's dashboard there (0: a free port)
};

namespace {

using ft::plugin::TrainerKey;
using Loaded = ft::recipe::Loaded<ft::recipe::Recipe>;

// The policies this ftrun knows by name, to spell a missing combination in C++.
// Policies of third-party plugins are spelled by the plugins themselves.
using KnownPolicies = ft::stock::All;

template <class Family>
std::string cpp_name(std::string_view name) {
  std::string found;
  std::apply(
      [&](auto... p) {
        ((std::is_base_of_v<Family, decltype(p)> && decltype(p)::name == name
              ? void(found = decltype(p)::type_name)
              : void()),
         ...);
      },
      KnownPolicies{});
  return found.empty() ? "/* the policy named \"" + std::string(name) + "\" */" : found;
}

// Whether this ftrun's build compiled the CUDA backend (and so its CUDA plugins).
#ifdef FT_WITH_CUDA
constexpr bool cuda_built = true;
#else
constexpr bool cuda_built = false;
#endif

struct PolicyField {
  std::string TrainerKey::*member;
  const char* recipe_key;
  const char* what;
};

constexpr PolicyField policy_fields[] = {
    {&TrainerKey::model, "model.family", "model family"},
    {&TrainerKey::precision, "strategy.precision", "precision"},
    {&TrainerKey::parallelism, "strategy.parallelism", "parallelism"},
    {&TrainerKey::optimizer, "strategy.optimizer", "optimizer"},
    {&TrainerKey::adapter, "strategy.adapter", "adapter"},
    {&TrainerKey::device, "strategy.device", "device"},
};

// Reads config.json when model.family is "auto".
std::string resolve_family(const Loaded& loaded, const ft::plugin::Registry& registry) {
  const auto& model = loaded.recipe.model;
  if (model.family != "auto") return model.family;
  std::string architecture = ft::io::hf_architecture(model.path);
  if (auto family = registry.family_for(architecture)) return *family;
  std::set<std::string> supported;
  for (const auto& f : registry.factories()) supported.insert(f.hf_architectures.begin(), f.hf_architectures.end());
  std::string list;
  for (const auto& s : supported) list += (list.empty() ? "" : ", ") + s;
  throw ft::Error(model.path + "/config.json: architecture \"" + architecture +
                  "\" is not supported by any plugin; supported: " + (list.empty() ? "none" : list));
}

// A policy name no plugin offers is a recipe error at that key.
void check_names_offered(const Loaded& loaded, const TrainerKey& key, const ft::plugin::Registry& registry) {
  for (const PolicyField& field : policy_fields) {
    auto offered = registry.names(field.member);
    if (offered.count(key.*field.member)) continue;
    std::string list;
    for (const auto& n : offered) list += (list.empty() ? "" : ", ") + n;
    std::string why;
    if (field.member == &TrainerKey::device && key.device == "cuda" && !cuda_built)
      why = " (this ft was built without CUDA: no nvcc was found when it was configured)";
    throw loaded.error(field.recipe_key, "no plugin offers the " + std::string(field.what) + " \"" +
                                             key.*field.member + "\"; offered: " + (list.empty() ? "none" : list) +
                                             why);
  }
}

std::string missing_combination(const TrainerKey& key, const ft::plugin::Registry& registry) {
  std::ostringstream os;
  os << "no plugin offers the trainer " << key.str() << "\n";
  os << "  closest offered:\n";
  for (const auto* f : registry.closest(key, 5)) {
    os << "    " << f->key.str() << "  from " << f->plugin->name() << "  (differs in";
    for (const PolicyField& field : policy_fields)
      if (f->key.*field.member != key.*field.member) os << ' ' << field.what;
    os << ")\n";
  }
  os << "  to offer it, build a plugin from these lines (see examples/third_party_plugin):\n"
     << "    #include <ft/plugin/define.hpp>\n"
     << "    FT_PLUGIN(\"my-plugin\", \"0.1.0\",\n"
     << "              ft::Trainer<" << cpp_name<ft::models::Policy>(key.model) << ", "
     << cpp_name<ft::precision::Policy>(key.precision) << ", " << cpp_name<ft::parallel::Policy>(key.parallelism) << ",\n"
     << "                          " << cpp_name<ft::optim::Policy>(key.optimizer) << ", "
     << cpp_name<ft::adapters::Policy>(key.adapter)
     << (key.device == "cuda" ? ", ft::device::Cuda>)  // in a .cu source that includes ft/device/cuda.cuh" : ">)");
  return os.str();
}

// The variables of this environment that NCCL, UCX, libfabric and CUDA read,
// by name, in order.
std::vector<std::string> forwarded_variables() {
  std::vector<std::string> names;
  for (char** entry = environ; *entry; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    for (std::string_view prefix : {"NCCL_", "UCX_", "FI_", "CUDA_"})
      if (name.starts_with(prefix)) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The command that starts the job: mpirun with nproc copies of this ftrun
// and its arguments. Threads per rank: OMP_NUM_THREADS when set, else this
// machine's cores shared out. No binding: each rank runs an OpenMP pool.
std::vector<std::string> launch_argv(const TrainOptions& options, const ft::recipe::Recipe& recipe) {
  std::vector<std::string> argv;
  const auto nproc = recipe.launch.nproc;
  if (nproc > 1) {
    argv = {"mpirun", "-np", std::to_string(nproc), "--bind-to", "none", "--stdin", "none"};
    if (recipe.launch.hostfile.empty()) argv.push_back("--oversubscribe");
    else argv.insert(argv.end(), {"--hostfile", recipe.launch.hostfile});
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(threads_per_rank(nproc))});
    // mpirun passes its environment to the ranks on this machine only: the
    // communication libraries' settings reach every machine's ranks with -x.
    for (const std::string& name : forwarded_variables())
      if (name != "CUDA_VISIBLE_DEVICES" || recipe.launch.devices.empty()) argv.insert(argv.end(), {"-x", name});
    if (!recipe.launch.devices.empty())
      argv.insert(argv.end(), {"-x", "CUDA_VISIBLE_DEVICES=" + recipe.launch.devices});
    argv.insert(argv.end(), recipe.launch.mpirun_args.begin(), recipe.launch.mpirun_args.end());
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  argv.insert(argv.end(), {ec ? std::string("ftrun") : self.string(), "train", options.recipe});
  for (const auto& s : options.sets) argv.insert(argv.end(), {"--set", s});
  for (const auto& p : options.plugins) argv.insert(argv.end(), {"--plugin", p});
  return argv;
}

// A word as a POSIX shell reads it back.
std::string shell_quoted(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/=:@+%") ==
                           std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) line += (line.empty() ? "" : " ") + shell_quoted(word);
  return line;
}

// Every host a hostfile names must resolve, or mpirun would fail later and
// less clearly (or wait on a connection).
void check_hostfile(const std::string& file) {
  for (const HostfileEntry& entry : hostfile_hosts(file)) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(entry.host.c_str(), nullptr, nullptr, &found);
    if (found) ::freeaddrinfo(found);
    if (rc != 0)
      throw ft::Error(file + ":" + std::to_string(entry.line) + ": launch.hostfile names the host \"" + entry.host +
                      "\", which does not resolve (" + ::gai_strerror(rc) + "); allowed: a host name or address "
                      "this machine can reach");
  }
}

// Starts the job's mpirun and waits for it, forwarding an operator's stop:
// SIGINT, SIGTERM or SIGUSR1 here becomes SIGUSR1 to mpirun, which passes
// it to every rank as a request to stop after the step in flight
// (core/signals.hpp); mpirun's own answer to SIGINT or SIGTERM would kill
// the ranks a second later. mpirun runs in a process group of its own, so
// Ctrl-C at the terminal reaches only this process, and without stdin,
// which a background group may not read. A second SIGINT ends the job at
// once (mpirun's SIGTERM). SIGUSR2, a checkpoint after the step and training
// going on, passes to mpirun as it is. Returns mpirun's exit status.
int start_job(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& word : argv) args.push_back(const_cast<char*>(word.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  sigset_t heard, before;
  sigemptyset(&heard);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&heard, s);
  ::sigprocmask(SIG_BLOCK, &heard, &before);
  // Written before fork: the child only calls write(2), since this process
  // may have other threads (the dashboard's) holding the allocator's lock.
  const std::string cannot_start = "ftrun: launch.nproc = " + argv[2] + " needs mpirun, which could not start: ";
  const std::string remedy = " (install openmpi-bin, or start the ranks yourself with mpirun or srun)\n";
  const pid_t mpirun = ::fork();
  if (mpirun == 0) {
    ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::execvp(args[0], args.data());
    const char* error = std::strerror(errno);
    for (const std::string_view part : {std::string_view(cannot_start), std::string_view(error), std::string_view(remedy)})
      (void)!::write(STDERR_FILENO, part.data(), part.size());
    ::_exit(failed);
  }
  if (mpirun < 0) {
    std::cerr << "ftrun: could not start mpirun: " << std::strerror(errno) << "\n";
    return failed;
  }
  bool stopping = false;
  for (;;) {
    int status = 0;
    if (::waitpid(mpirun, &status, WNOHANG) == mpirun)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const timespec period{0, 200'000'000};
    const int s = ::sigtimedwait(&heard, nullptr, &period);
    if (s == SIGUSR2) {
      std::cerr << "\nftrun: SIGUSR2: every rank writes a checkpoint after the step in flight and goes on\n";
      ::kill(mpirun, SIGUSR2);
      continue;
    }
    if (s != SIGINT && s != SIGTERM && s != SIGUSR1) continue;
    if (stopping && s == SIGINT) {
      std::cerr << "\nftrun: SIGINT again: ending the job now\n";
      ::kill(mpirun, SIGTERM);
    } else if (!stopping) {
      stopping = true;
      std::cerr << "\nftrun: " << ft::signals::name(s)
                << ": every rank stops after the step in flight, with a checkpoint (Ctrl-C again ends at once)\n";
      ::kill(mpirun, SIGUSR1);
    }
  }
}

control::JobRecord training_record(const std::string& output_dir, const std::string& recipe, int ranks) {
  control::JobRecord record;
  record.id = control::job_id(output_dir, ::getpid());
  record.kind = "train";
  record.pid = ::getpid();
  record.ranks = ranks;
  std::error_code ec;
  record.recipe = std::filesystem::absolute(recipe, ec).string();
  record.output_dir = std::filesystem::absolute(output_dir, ec).string();
  return record;
}

// ftrun control's requests to a training job become the signals its loop
// reads between steps (core/signals.hpp), which its ranks agree on there;
// status is read from metrics.jsonl, as far as this process has written it.
control::Answer training_answer(const std::string& output_dir) {
  auto reading = std::make_shared<control::RunProgress>(output_dir);
  auto asked_stop = std::make_shared<bool>(false);
  return [=](const std::string& request) -> nlohmann::ordered_json {
    nlohmann::ordered_json progress = reading->read();
    const bool training = progress["state"] == "training";
    if (request == "status") {
      if (*asked_stop) progress["state"] = "stopping";
      nlohmann::ordered_json answer{{"ok", true}};
      answer.update(progress);
      return answer;
    }
    if (request == "abort") return {{"ok", true}, {"says", "ends now without saving"}};
    if (request != "save" && request != "stop")
      return {{"ok", false}, {"error", "unknown request \"" + request + "\"; allowed: status, save, stop, abort"}};
    if (!training)
      return {{"ok", false}, {"error", "still setting up (nothing to save yet); ask again once it trains, or abort"}};
    if (request == "save") {
      ::kill(::getpid(), SIGUSR2);
      return {{"ok", true}, {"says", "saves a checkpoint after the step in flight and goes on"}};
    }
    *asked_stop = true;
    ::kill(::getpid(), SIGUSR1);
    return {{"ok", true}, {"says", "stops after the step in flight, with a checkpoint"}};
  };
}

// The estimated peak of each rank, for the dashboard to draw beside the measured one.
void write_plan(const ft::recipe::Recipe& recipe) {
  std::vector<std::uint64_t> peaks;
  try {
    for (const auto& rank : ft::estimate::estimate_memory_by_rank(recipe)) peaks.push_back(rank.step_peak());
    write_memory_plan(recipe.output_dir, peaks);
  } catch (const std::exception&) {
    // A policy the estimate has no model for, or a directory not writable yet: the dashboard draws no plan.
  }
}

// The dashboard over this run, when --dashboard asks for one; a port it cannot take does not stop the run.
std::unique_ptr<Dashboard> dashboard_of(const TrainOptions& options, const std::string& output_dir) {
  if (options.dashboard < 0) return nullptr;
  try {
    auto dashboard = std::make_unique<Dashboard>(std::vector<std::filesystem::path>{output_dir}, "127.0.0.1",
                                                 options.dashboard);
    std::cerr << "ftrun: dashboard at " << dashboard->url() << std::endl;
    return dashboard;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: no dashboard: " << e.what() << "\n";
    return nullptr;
  }
}

std::string as_comment(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += "#   " + line + "\n";
  return out;
}

// srun starts every rank itself, and Open MPI's ranks find each other
// through the PMIx server that srun runs only when asked (--mpi=pmix, or
// MpiDefault=pmix in slurm.conf). Without it each rank would end in MPI_Init
// with a page of text; this says it in one line before that.
std::string srun_without_pmix(const ft::comm::JobPlace& job) {
  if (job.launcher != "srun" || job.size <= 1 || std::getenv("PMIX_RANK") || std::getenv("PMI_FD")) return "";
  return "srun started this job's " + std::to_string(job.size) +
         " ranks without an MPI plugin, so they cannot find each other (no PMIX_RANK in the environment); "
         "start it with srun --mpi=pmix, or set MpiDefault=pmix in slurm.conf";
}

}  // namespace

int run_train(const TrainOptions& options) {
  Loaded loaded;
  try {
    loaded = ft::recipe::load<ft::recipe::Recipe>(options.recipe, options.sets);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
  // Before anything asks CUDA about its devices: under mpirun or srun the ranks read the recipe themselves.
  if (!loaded.recipe.launch.devices.empty()) ::setenv("CUDA_VISIBLE_DEVICES", loaded.recipe.launch.devices.c_str(), 1);

  PluginSearch search;
  try {
    search = find_plugins(options.plugins, loaded.recipe.strategy.device);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return plugin_refused;
  }
  std::size_t warned = 0;
  auto warn_refused = [&] {
    for (; warned < search.refusals.size(); ++warned) std::cerr << "ftrun: warning: " << search.refusals[warned] << "\n";
  };
  warn_refused();

  std::string resolved, plan;
  const ft::plugin::Factory* factory = nullptr;
  const ft::comm::JobPlace job = ft::comm::job_place();  // this process's place, when a launcher started it
  if (const std::string why = srun_without_pmix(job); !why.empty()) {
    if (job.rank == 0) std::cerr << "ftrun: " << why << "\n";
    return bad_input;
  }
  try {
    ft::recipe::Recipe& recipe = loaded.recipe;
    recipe.strategy.parallelism = ft::parallel::canonical_name(recipe.strategy.parallelism);
    if (job.size > 1 && recipe.launch.nproc > 1 && recipe.launch.nproc != job.size)
      throw loaded.error("launch.nproc", "is " + std::to_string(recipe.launch.nproc) + ", but " + job.launcher +
                                             " started this job with " + std::to_string(job.size) +
                                             " ranks; allowed: 1 or " + std::to_string(job.size));
    if (job.size > 1) recipe.launch.nproc = job.size;
    // The plugins set aside are loaded only when those loaded do not serve the recipe.
    while (!factory) {
      try {
        recipe.model.family = resolve_family(loaded, search.registry);
        const TrainerKey key{recipe.model.family,     recipe.strategy.precision, recipe.strategy.parallelism,
                             recipe.strategy.optimizer, recipe.strategy.adapter,   recipe.strategy.device};
        check_names_offered(loaded, key, search.registry);
        factory = search.registry.find(key);
        if (!factory) throw ft::Error(missing_combination(key, search.registry));
      } catch (const ft::Error&) {
        if (!search.load_deferred()) throw;
        warn_refused();
      }
    }
    resolved = ft::recipe::emit(recipe);
    plan = "plugin       " + factory->plugin->name() + " " + factory->plugin->version() + " (" +
           factory->plugin->path().string() + ")\n" + ft::plugin::plan(*factory, resolved);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }

  // Every rank checks (the estimate is the same on each), so a job that mpirun,
  // srun or an MPIJob started ends on all of them; rank 0 says why.
  if (!options.dry_run) {
    const ft::recipe::Recipe& r = loaded.recipe;
    const std::int64_t ranks_here = job.size > 1             ? job.local_size
                                    : r.launch.hostfile.empty() ? std::max<std::int64_t>(1, r.launch.nproc)
                                                                : 1;  // a hostfile spreads them; each host has its own
    try {
      const std::string unchecked = check_memory_fits(loaded, ranks_here, r.launch.nproc > 1 && job.size == 1, search);
      if (!unchecked.empty() && job.rank == 0) std::cerr << "ftrun: memory not checked before the run: " << unchecked << "\n";
    } catch (const ft::OutOfMemory& e) {
      if (job.rank == 0) std::cerr << "ftrun: " << e.what() << "\n";
      return out_of_memory;
    }
  }

  const std::vector<std::string> launch = launch_argv(options, loaded.recipe);
  const bool starts_job = loaded.recipe.launch.nproc > 1 && job.size == 1;
  if (!options.dry_run && starts_job) {
    try {
      if (!loaded.recipe.launch.hostfile.empty()) check_hostfile(loaded.recipe.launch.hostfile);
    } catch (const ft::Error& e) {
      std::cerr << "ftrun: " << e.what() << "\n";
      return bad_input;
    }
    const auto dashboard = dashboard_of(options, loaded.recipe.output_dir);
    return start_job(launch);
  }
  if (!options.dry_run) {
    // Rank 0 answers ftrun control for the job; without a registry the run goes on, uncontrolled.
    std::optional<control::Registration> registration;
    std::unique_ptr<Dashboard> dashboard;
    if (job.rank == 0) {
      write_plan(loaded.recipe);
      dashboard = dashboard_of(options, loaded.recipe.output_dir);
      try {
        registration.emplace(training_record(loaded.recipe.output_dir, options.recipe, std::max(1, job.size)),
                             training_answer(loaded.recipe.output_dir));
      } catch (const std::exception& e) {
        std::cerr << "ftrun: ftrun control cannot reach this job: " << e.what() << "\n";
      }
    }
    const auto [status, reason] = ft::plugin::train(*factory, resolved);
    if (status == 4) {
      if (job.rank == 0) std::cerr << "ftrun: " << reason << "\n";  // every rank stopped at the same step
      return stopped;
    }
    if (status != 0) std::cerr << "ftrun: " << reason << "\n";
    return status == 0 ? ok : status == 2 ? bad_input : status == 3 ? out_of_memory : failed;
  }
  std::cout << "# Resolved recipe (" << options.recipe << " with defaults and overrides applied).\n"
            << "# Plan:\n" << as_comment(plan) << "# Launch:\n#   " << command_line(launch)
            << "\n\n" << resolved;
  return ok;
}

Command add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* command = app.add_subcommand("train", "Resolve a recipe to a Trainer and check it (--dry-run prints the plan)");
  add_recipe_options(command, o->recipe, o->sets);
  command->add_option("--plugin", o->plugins, "Also load this plugin file (repeatable)");
  command->add_flag("--dry-run", o->dry_run, "Print the resolved recipe, the plan and the launch command");
  command->add_option("--dashboard", o->dashboard,
                      "Serve the run's live dashboard on this port of localhost (0: a free one; see ftrun dashboard)");
  return {command, [o] { return run_train(*o); }};
}

}  // namespace ftrun
