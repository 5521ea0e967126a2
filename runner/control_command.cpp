// ftrun control: the jobs this user runs on this machine (control/job_registry.hpp).
//
//   list           each job's id, kind, state, step, ranks and output_dir
//   status JOB     where it is (--json for the job's whole answer)
//   save JOB       a checkpoint after the step in flight; training goes on
//   stop JOB       a checkpoint after the step in flight, then exit code 5
//   abort JOB      end now, without saving
//   cleanup        forget jobs whose process is gone
//
// JOB is an id from `list`, a job's pid or its output_dir. A request
// reaches every rank of a job: rank 0 answers and the ranks agree on it
// between steps (core/signals.hpp).
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <ft/core/error.hpp>

#include "commands.hpp"
#include "control/job_registry.hpp"
#include "exit_code.hpp"

namespace ftrun {

namespace {

namespace fs = std::filesystem;
using control::JobRecord;

struct ControlOptions {
  std::string job;
  bool json = false;
};

// Whose process `pid` is: a user name, or the uid as text.
std::string owner_of(int pid) {
  struct stat info {};
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &info) != 0) return "";
  if (const passwd* p = ::getpwuid(info.st_uid)) return p->pw_name;
  return "uid " + std::to_string(info.st_uid);
}

bool is_number(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// The registered job JOB names: its id, its pid or its output_dir.
JobRecord find_job(const std::string& name) {
  std::error_code ec;
  const fs::path as_dir = fs::weakly_canonical(name, ec);
  for (const JobRecord& job : control::registered_jobs()) {
    if (job.id == name || (is_number(name) && std::stoll(name) == job.pid)) return job;
    if (job.kind == "train" && !ec && fs::weakly_canonical(job.output_dir, ec) == as_dir) return job;
  }
  if (is_number(name) && ::kill(std::stoi(name), 0) == 0 && owner_of(std::stoi(name)) != owner_of(::getpid()))
    throw ft::Error("job " + name + ": process " + name + " belongs to " + owner_of(std::stoi(name)) +
                    "; ftrun control reaches only your own jobs");
  if (is_number(name) && ::kill(std::stoi(name), 0) != 0 && errno == EPERM)
    throw ft::Error("job " + name + ": process " + name + " belongs to another user; ftrun control reaches only your own jobs");
  throw ft::Error("no job \"" + name + "\" is registered in " + control::registry_dir().string() +
                  "; allowed: an id that `ftrun control list` shows, a job's pid or its output_dir");
}

// The job's answer to `request`, which must say ok.
nlohmann::json ask_or_fail(const JobRecord& job, const std::string& request) {
  if (!control::alive(job))
    throw ft::Error("job " + job.id + ": process " + std::to_string(job.pid) +
                    " is gone (killed?); `ftrun control cleanup` forgets it");
  const auto answer = control::ask(job, request);
  if (!answer) throw ft::Error("job " + job.id + " (pid " + std::to_string(job.pid) + ") does not answer on " + job.socket.string());
  if (!answer->value("ok", false))
    throw ft::Error("job " + job.id + ": " + answer->value("error", std::string("refused ") + request));
  return *answer;
}

std::string step_text(const nlohmann::json& status) {
  if (!status.contains("step")) return "-";
  std::string text = status["step"].dump();
  if (status.contains("total_steps")) text += "/" + status["total_steps"].dump();
  return text;
}

int list_jobs() {
  const std::vector<JobRecord> jobs = control::registered_jobs();
  if (jobs.empty()) {
    std::cout << "no jobs (registry " << control::registry_dir().string() << ")\n";
    return ok;
  }
  std::ostringstream table;
  table << std::left << std::setw(32) << "ID" << std::setw(7) << "KIND" << std::setw(15) << "STATE" << std::setw(14)
        << "STEP" << std::setw(7) << "RANKS" << "OUTPUT_DIR\n";
  for (const JobRecord& job : jobs) {
    std::string state = "dead", step = "-";
    if (control::alive(job)) {
      if (const auto answer = control::ask(job, "status", 2); answer && answer->value("ok", false)) {
        state = answer->value("state", std::string("?"));
        step = step_text(*answer);
      } else {
        state = "not answering";
      }
    }
    table << std::setw(32) << job.id << std::setw(7) << job.kind << std::setw(15) << state << std::setw(14) << step
          << std::setw(7) << job.ranks << job.output_dir << "\n";
  }
  std::cout << table.str();
  return ok;
}

int job_status(const ControlOptions& o) {
  const JobRecord job = find_job(o.job);
  nlohmann::json answer = ask_or_fail(job, "status");
  answer.erase("ok");
  if (o.json) {
    nlohmann::ordered_json out = job.to_json();
    out.update(nlohmann::ordered_json(answer));
    std::cout << out.dump(2) << "\n";
    return ok;
  }
  std::cout << "job         " << job.id << " (" << job.kind << ", pid " << job.pid << ", " << job.ranks
            << (job.ranks == 1 ? " rank" : " ranks") << ", started " << job.started << ")\n"
            << "state       " << answer.value("state", std::string("?")) << "\n";
  if (job.kind == "train") {
    std::cout << "step        " << step_text(answer) << "\n";
    for (const auto& [key, label] : {std::pair{"loss", "loss        "}, {"learning_rate", "lr          "},
                                     {"tokens_per_second", "tokens/s    "}, {"seconds_per_step", "s/step      "},
                                     {"last_save", "last save   "}})
      if (answer.contains(key)) std::cout << label << answer[key].dump() << "\n";
    std::cout << "recipe      " << job.recipe << "\n";
  } else {
    std::cout << "model       " << job.recipe << "\n"
              << "requests    " << answer.value("running", 0) << " running, " << answer.value("waiting", 0) << " waiting\n";
  }
  std::cout << (job.kind == "train" ? "output_dir  " : "address     ") << job.output_dir << "\n";
  return ok;
}

int send_request(const ControlOptions& o, const std::string& request) {
  const JobRecord job = find_job(o.job);
  const nlohmann::json answer = ask_or_fail(job, request);
  std::cout << "ftrun control: " << request << " " << job.id << ": " << answer.value("says", std::string("done")) << "\n";
  return ok;
}

int cleanup() {
  int removed = 0;
  for (const JobRecord& job : control::registered_jobs()) {
    if (control::alive(job)) continue;
    std::error_code ec;
    fs::remove(job.socket, ec);
    fs::remove(control::registry_dir() / (job.id + ".json"), ec);
    std::cout << "removed " << job.id << " (process " << job.pid << " is gone)\n";
    ++removed;
  }
  if (removed == 0) std::cout << "no dead jobs\n";
  return ok;
}

}  // namespace

Command add_control_command(CLI::App& app) {
  auto o = std::make_shared<ControlOptions>();
  CLI::App* command = app.add_subcommand("control", "List this user's running jobs; ask one for its status, a checkpoint, a stop or an abort");
  command->require_subcommand(1);
  auto with_job = [&](const char* name, const char* what) {
    CLI::App* sub = command->add_subcommand(name, what);
    sub->add_option("JOB", o->job, "An id from `ftrun control list`, a job's pid or its output_dir")->required();
    return sub;
  };
  CLI::App* list = command->add_subcommand("list", "Each job's id, kind, state, step, ranks and output_dir");
  CLI::App* status = with_job("status", "Where the job is: state, step, loss, learning rate, speed, last checkpoint");
  status->add_flag("--json", o->json, "The job's record and answer as JSON");
  CLI::App* save = with_job("save", "Write a checkpoint after the step in flight; training goes on");
  CLI::App* stop = with_job("stop", "Write a checkpoint after the step in flight and exit with code 5 (resume = \"auto\" continues)");
  CLI::App* abort = with_job("abort", "End the job now, without saving");
  CLI::App* clean = command->add_subcommand("cleanup", "Forget jobs whose process is gone");
  return {command, [=] {
            return exit_code_of([&]() -> int {
              if (list->parsed()) return list_jobs();
              if (status->parsed()) return job_status(*o);
              if (save->parsed()) return send_request(*o, "save");
              if (stop->parsed()) return send_request(*o, "stop");
              if (abort->parsed()) return send_request(*o, "abort");
              if (clean->parsed()) return cleanup();
              return failed;
            });
          }};
}

}  // namespace ftrun
