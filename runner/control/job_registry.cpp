#include "control/job_registry.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>

#include <ft/core/error.hpp>

namespace ftrun::control {

namespace fs = std::filesystem;

fs::path registry_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const fs::path dir = runtime && *runtime ? fs::path(runtime) / "ftrun"
                                           : fs::path("/tmp") / ("ftrun-" + std::to_string(::getuid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  ::chmod(dir.c_str(), 0700);
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    throw ft::Error("the job registry " + dir.string() + " cannot be made: " + std::strerror(errno));
  if (info.st_uid != ::getuid())
    throw ft::Error("the job registry " + dir.string() + " belongs to another user (uid " + std::to_string(info.st_uid) +
                    "); set XDG_RUNTIME_DIR to a directory of yours");
  return dir;
}

nlohmann::ordered_json JobRecord::to_json() const {
  return {{"id", id},         {"kind", kind},       {"pid", pid},         {"ranks", ranks},
          {"recipe", recipe}, {"output_dir", output_dir}, {"started", started}, {"socket", socket.string()}};
}

JobRecord JobRecord::from_json(const nlohmann::json& j) {
  JobRecord r;
  r.id = j.at("id").get<std::string>();
  r.kind = j.at("kind").get<std::string>();
  r.pid = j.at("pid").get<int>();
  r.ranks = j.at("ranks").get<int>();
  r.recipe = j.at("recipe").get<std::string>();
  r.output_dir = j.at("output_dir").get<std::string>();
  r.started = j.at("started").get<std::string>();
  r.socket = j.at("socket").get<std::string>();
  return r;
}

std::string job_id(const std::string& output_dir, int pid) {
  std::string name = fs::path(output_dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(output_dir).lexically_normal().parent_path().filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  if (name.size() > 40) name.resize(40);  // a Unix socket's path must stay under 108 bytes
  return (name.empty() ? std::string("job") : name) + "-" + std::to_string(pid);
}

namespace {

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

sockaddr_un address_of(const fs::path& socket) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket.string().size() >= sizeof address.sun_path)
    throw ft::Error("the job socket path " + socket.string() + " is longer than a Unix socket allows (" +
                    std::to_string(sizeof address.sun_path - 1) + " bytes); set XDG_RUNTIME_DIR to a shorter directory");
  std::strcpy(address.sun_path, socket.c_str());
  return address;
}

// The whole of a short message, up to its first newline.
std::string read_line(int fd, int timeout_ms) {
  std::string line;
  char buffer[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) break;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    line.append(buffer, std::size_t(n));
  }
  return line.substr(0, line.find('\n'));
}

void write_all(int fd, const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    const ssize_t n = ::send(fd, text.data() + at, text.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += std::size_t(n);
  }
}

}  // namespace

Registration::Registration(JobRecord record, Answer answer) : record_(std::move(record)), answer_(std::move(answer)) {
  const fs::path dir = registry_dir();
  record_.started = now_utc();
  record_.socket = dir / (record_.id + ".sock");
  fs::remove(record_.socket);
  const sockaddr_un address = address_of(record_.socket);
  listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_, 8) != 0) {
    const std::string why = std::strerror(errno);
    if (listener_ >= 0) ::close(listener_);
    throw ft::Error("cannot answer ftrun control on " + record_.socket.string() + ": " + why);
  }
  ::chmod(record_.socket.c_str(), 0600);
  const fs::path file = dir / (record_.id + ".json"), staging = dir / (record_.id + ".json.tmp");
  std::ofstream(staging) << record_.to_json().dump() << "\n";
  fs::rename(staging, file);
  thread_ = std::thread([this] { answer_requests(); });
}

Registration::~Registration() {
  done_ = true;
  thread_.join();
  ::close(listener_);
  std::error_code ec;
  fs::remove(record_.socket, ec);
  fs::remove(record_.socket.parent_path() / (record_.id + ".json"), ec);
}

void Registration::answer_requests() {
  while (!done_) {
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const std::string request = read_line(client, 2000);
    nlohmann::ordered_json answer;
    try {
      answer = answer_(request);
    } catch (const std::exception& e) {
      answer = {{"ok", false}, {"error", e.what()}};
    }
    write_all(client, answer.dump() + "\n");
    ::close(client);
    if (request == "abort" && answer.value("ok", false)) {
      std::fflush(stdout);
      std::fprintf(stderr, "\nftrun: aborted by ftrun control abort %s\n", record_.id.c_str());
      std::fflush(stderr);
      std::_Exit(130);
    }
  }
}

std::vector<JobRecord> registered_jobs() {
  std::vector<JobRecord> jobs;
  for (const auto& entry : fs::directory_iterator(registry_dir())) {
    if (entry.path().extension() != ".json") continue;
    try {
      jobs.push_back(JobRecord::from_json(nlohmann::json::parse(std::ifstream(entry.path()))));
    } catch (const std::exception&) {
      // A record being written, or not ftrun's: not a job.
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const JobRecord& a, const JobRecord& b) { return a.started < b.started; });
  return jobs;
}

bool alive(const JobRecord& job) { return ::kill(job.pid, 0) == 0 || errno == EPERM; }

std::optional<nlohmann::json> ask(const JobRecord& job, const std::string& request, double seconds) {
  const sockaddr_un address = address_of(job.socket);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<nlohmann::json> answer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    write_all(fd, request + "\n");
    const std::string line = read_line(fd, int(seconds * 1000));
    try {
      if (!line.empty()) answer = nlohmann::json::parse(line);
    } catch (const std::exception&) {
    }
  }
  ::close(fd);
  return answer;
}

}  // namespace ftrun::control
