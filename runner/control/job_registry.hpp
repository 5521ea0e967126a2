#pragma once
// The jobs this user runs on this machine, as `ftrun control` finds them.
// Each running `ftrun train` (rank 0 of a job) and `ftrun serve` writes a
// record, JOB.json, into the registry directory beside a Unix socket,
// JOB.sock, on which a thread of its own answers one request per
// connection (a line: status, save, stop or abort) with one line of JSON.
// The directory is the user's own ($XDG_RUNTIME_DIR/ftrun, else
// /tmp/ftrun-UID, mode 0700), so another user cannot reach a job through it.
// A job killed with SIGKILL leaves its record behind: `list` shows it as
// dead and `cleanup` removes it.
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftrun::control {

std::filesystem::path registry_dir();

struct JobRecord {
  std::string id;
  std::string kind;  // "train" or "serve"
  int pid = 0;
  int ranks = 1;
  std::string recipe;      // train: the recipe file; serve: the model
  std::string output_dir;  // train: where the run writes; serve: the address it listens on
  std::string started;     // UTC, ISO 8601
  std::filesystem::path socket;

  nlohmann::ordered_json to_json() const;
  static JobRecord from_json(const nlohmann::json& j);
};

// A job's answer to a request it knows; {"ok": false, "error": ...} for one it does not.
using Answer = std::function<nlohmann::ordered_json(const std::string& request)>;

// Registers this process as a job and answers on its socket until destroyed;
// then its record and socket are removed. `abort` is answered here: the
// process ends at once with code 130, as at a second Ctrl-C.
class Registration {
public:
  Registration(JobRecord record, Answer answer);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  const JobRecord& record() const { return record_; }

private:
  void answer_requests();

  JobRecord record_;
  Answer answer_;
  int listener_ = -1;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Every record in the registry, by id.
std::vector<JobRecord> registered_jobs();

// Whether the job's process still exists.
bool alive(const JobRecord& job);

// Sends one request; the job's answer, or nothing when it does not answer within `seconds`.
std::optional<nlohmann::json> ask(const JobRecord& job, const std::string& request, double seconds = 5);

// A short id for a new job: the output directory's name and the pid.
std::string job_id(const std::string& output_dir, int pid);

}  // namespace ftrun::control
