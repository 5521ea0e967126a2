#pragma once
// ftrun's live dashboard: one web page (page.html, served by ftrun with its
// chart code, so it works offline) over runs' output directories. The page
// reads each run's metrics.jsonl as server-sent events (the records so far,
// then each as the run appends it), the memory plan the run wrote beside it
// (memory_plan.json), and the state of the `ftrun train` job writing to the
// directory (control/job_registry.hpp), whose Save and Stop buttons send
// `ftrun control`'s requests. It listens on localhost unless told otherwise;
// a control request must carry the page's own header, so that another web
// page cannot send one.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ftrun {

class Dashboard {
public:
  // Serves `run_dirs` on host:port (port 0: a free one) from threads of its
  // own, which leave the process's stopping signals to its other threads.
  // Throws ft::Error when it cannot listen there.
  Dashboard(std::vector<std::filesystem::path> run_dirs, const std::string& host, int port);
  ~Dashboard();  // stops serving
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  std::string url() const;

private:
  struct Server;
  std::unique_ptr<Server> server_;
};

// The estimated peak memory of each rank, as `ftrun estimate` plans it,
// written into the run's output directory for the dashboard.
void write_memory_plan(const std::filesystem::path& output_dir, const std::vector<std::uint64_t>& peak_by_rank);

}  // namespace ftrun
