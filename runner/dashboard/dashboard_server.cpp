#include "dashboard_server.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <string_view>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include <ft/core/error.hpp>

#include "atomic_file.hpp"
#include "control/appended_lines.hpp"
#include "control/job_registry.hpp"
#include "dashboard_page.hpp"

// After every header that includes Eigen: a system header httplib pulls in
// defines a macro that breaks Eigen's (runner/CMakeLists.txt).
#include <httplib.h>

namespace ftrun {
// Named rather than anonymous: Dashboard::Server, declared in the header, holds these types.
namespace dashboard_serving {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* plan_file = "memory_plan.json";

// The records of a run's metrics.jsonl that one page has not been sent yet,
// as server-sent events for run `index`; a file written again from the top
// (a run started again in the directory) is sent again after a reset.
std::string reset_event(std::size_t index) {
  return "event: reset\ndata: {\"run\":" + std::to_string(index) + "}\n\n";
}

struct Tail {
  control::AppendedLines lines;
  std::size_t index;

  std::string events() {
    std::string out;
    const std::string run = "{\"run\":" + std::to_string(index);
    lines.read(
        [&](std::string_view line) {
          if (!json::parse(line, nullptr, false).is_object()) return;  // a line torn by a kill says nothing
          out += "event: record\ndata: " + run + ",\"record\":";
          out += line;
          out += "}\n\n";
        },
        [&] { out += reset_event(index); });
    return out;
  }
};

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  return fs::weakly_canonical(a, ec1) == fs::weakly_canonical(b, ec2) && !ec1 && !ec2;
}

// The running `ftrun train` that writes to `dir`, if any.
std::optional<control::JobRecord> job_writing(const fs::path& dir) {
  for (const control::JobRecord& job : control::registered_jobs())
    if (job.kind == "train" && same_directory(job.output_dir, dir) && control::alive(job)) return job;
  return std::nullopt;
}

json plan_of(const fs::path& dir) {
  std::ifstream in(dir / plan_file);
  if (!in) return nullptr;
  try {
    return json::parse(in).at("step_peak_bytes_by_rank");
  } catch (const json::exception&) {
    return nullptr;
  }
}

// The stopping signals stay with the process's other threads: ftrun train
// waits for them in its main thread, or reads them between steps.
void leave_stopping_signals() {
  sigset_t stopping;
  sigemptyset(&stopping);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&stopping, s);
  ::pthread_sigmask(SIG_BLOCK, &stopping, nullptr);
}

}  // namespace dashboard_serving

struct Dashboard::Server {
  using json = nlohmann::json;
  using Tail = dashboard_serving::Tail;

  std::vector<std::filesystem::path> runs;
  std::string host;
  int port = 0;
  httplib::Server http;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::atomic<bool> listen_ended{false};

  json runs_json() {
    json list = json::array();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      json run{{"index", i}, {"name", runs[i].filename().string()}, {"dir", runs[i].string()}, {"job", nullptr},
               {"plan", dashboard_serving::plan_of(runs[i])}};
      if (const auto job = dashboard_serving::job_writing(runs[i])) {
        json j{{"id", job->id}, {"pid", job->pid}, {"ranks", job->ranks}, {"state", "not answering"}};
        if (const auto answer = control::ask(*job, "status", 1); answer && answer->value("ok", false))
          j["state"] = answer->value("state", std::string("?"));
        run["job"] = j;
      }
      list.push_back(run);
    }
    return list;
  }

  json control_request(std::size_t index, const std::string& request) {
    const auto job = dashboard_serving::job_writing(runs[index]);
    if (!job) return {{"ok", false}, {"error", "no running ftrun train writes to " + runs[index].string()}};
    const auto answer = control::ask(*job, request, 5);
    if (!answer) return {{"ok", false}, {"error", "job " + job->id + " does not answer"}};
    return *answer;
  }

  // Whether a request's Host names this server as it listens: a page of
  // another site whose name was made to resolve here (DNS rebinding) says
  // that site's name.
  bool addressed_here(const std::string& host_header) const {
    const std::string at = ":" + std::to_string(port);
    for (const std::string& name : {host, std::string("localhost"), std::string("127.0.0.1"), std::string("[::1]")})
      if (host_header == name + at) return true;
    return false;
  }

  // Waits up to `period`; false once the dashboard stops.
  bool pause(std::chrono::milliseconds period) {
    std::unique_lock lock(mutex);
    return !wake.wait_for(lock, period, [this] { return stopping; });
  }

  void routes() {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(dashboard_page, "text/html; charset=utf-8");
    });
    http.Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(runs_json().dump(), "application/json");
    });
    http.Post(R"(/api/runs/(\d{1,6})/(save|stop))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::size_t index = std::stoul(req.matches[1].str());
      json answer;
      if (req.get_header_value("X-Ft-Dashboard") != "1" || !addressed_here(req.get_header_value("Host"))) {
        res.status = 403;
        answer = {{"ok", false}, {"error", "a control request must come from the dashboard's page"}};
      } else if (index >= runs.size()) {
        res.status = 404;
        answer = {{"ok", false}, {"error", "no run " + std::to_string(index)}};
      } else {
        answer = control_request(index, req.matches[2].str());
      }
      res.set_content(answer.dump(), "application/json");
    });
    http.Get("/api/events", [this](const httplib::Request&, httplib::Response& res) {
      auto tails = std::make_shared<std::vector<Tail>>();
      for (std::size_t i = 0; i < runs.size(); ++i)
        tails->push_back({control::AppendedLines(runs[i] / "metrics.jsonl"), i});
      auto first = std::make_shared<bool>(true);
      auto quiet_since = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [this, tails, first, quiet_since](std::size_t,
                                                                                               httplib::DataSink& sink) {
        std::string out;
        if (*first) {  // a page that connects again starts from the top
          for (std::size_t i = 0; i < tails->size(); ++i) out += dashboard_serving::reset_event(i);
          *first = false;
        }
        for (Tail& tail : *tails) out += tail.events();
        const auto now = std::chrono::steady_clock::now();
        if (out.empty() && now - *quiet_since > std::chrono::seconds(5)) out = ": still here\n\n";
        if (!out.empty()) {
          *quiet_since = now;
          return sink.write(out.data(), out.size());
        }
        return pause(std::chrono::milliseconds(250));
      });
    });
  }
};

Dashboard::Dashboard(std::vector<std::filesystem::path> run_dirs, const std::string& host, int port)
    : server_(std::make_unique<Server>()) {
  Server& s = *server_;
  for (std::filesystem::path& dir : run_dirs) s.runs.push_back(std::filesystem::absolute(dir).lexically_normal());
  s.host = host;
  s.routes();
  // Each open page holds a worker for its event stream: room for many pages and their requests.
  s.http.new_task_queue = [] { return new httplib::ThreadPool(64); };
  s.port = port == 0 ? s.http.bind_to_any_port(host) : (s.http.bind_to_port(host, port) ? port : -1);
  if (s.port < 0) throw ft::Error("the dashboard cannot listen on " + host + ":" + std::to_string(port));
  s.thread = std::thread([&s] {
    dashboard_serving::leave_stopping_signals();  // before listening: its worker threads inherit the mask
    s.http.listen_after_bind();
    s.listen_ended = true;
  });
  // Listening before the constructor returns: a stop that came earlier would not reach it.
  while (!s.http.is_running() && !s.listen_ended) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (!s.http.is_running()) {
    s.thread.join();
    throw ft::Error("the dashboard cannot listen on " + host + ":" + std::to_string(s.port));
  }
}

Dashboard::~Dashboard() {
  {
    std::lock_guard lock(server_->mutex);
    server_->stopping = true;
  }
  server_->wake.notify_all();
  server_->http.stop();
  if (server_->thread.joinable()) server_->thread.join();
}

std::string Dashboard::url() const {
  return "http://" + server_->host + ":" + std::to_string(server_->port) + "/";
}

void write_memory_plan(const std::filesystem::path& output_dir, const std::vector<std::uint64_t>& peak_by_rank) {
  std::error_code ec;
  std::filesystem::create_directories(output_dir, ec);
  write_atomically(output_dir / dashboard_serving::plan_file,
                   nlohmann::json{{"step_peak_bytes_by_rank", peak_by_rank}}.dump() + "\n");
}

}  // namespace ftrun
