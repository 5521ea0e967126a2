// ftrun bench: ft's version of ado's SFTTrainer actuator. Every point of a grid
// (bench_grid.hpp) is a real `ftrun train` in its own process (an mpirun job
// when it has several ranks), measured by the summary its run writes
// (train/summary.hpp), and recorded as ado records it:
//   valid     the run finished; its measured properties, and the gpu_*
//             ones ftrun bench samples beside it (gpu_monitor.hpp)
//   invalid   is_valid = false, no properties: the point breaks a validity
//             rule, ran out of memory (exit 4), or ft refuses the combination
//   failed    anything else (a crash, a time-out, a diverged loss): no
//             properties, run again (up to `retries` now, and on the next call)
// In the stability experiment every run is an outcome instead: f_gpu_oom,
// f_other_error and f_no_error over the repeats.
//
// Output, in the grid's output directory:
//   results.jsonl   one record per run, appended as it ends: an interrupted
//                   grid resumes where it stopped
//   results.csv     one row per finished run, rewritten from results.jsonl
//   stability.csv   per point, the stability experiment's fractions
//   throughput.svg, memory.svg   tokens/s and peak memory (measured, and the
//                   estimate dashed) against batch size, one line per configuration
//   iterations.svg  seconds per step along each run
//   runs/<point>-<repeat>-<hash>/ each run's metrics.jsonl, stdout and stderr
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/core/bytes.hpp>
#include <ft/core/error.hpp>
#include <ft/core/fingerprint.hpp>
#include <ft/core/progress.hpp>
#include <ft/estimate/memory_estimate.hpp>
#include <ft/recipe/load.hpp>

#include "atomic_file.hpp"
#include "bench_grid.hpp"
#include "child_process.hpp"
#include "commands.hpp"
#include "exit_code.hpp"
#include "gpu_monitor.hpp"
#include "svg_chart.hpp"

namespace ftrun {

struct BenchOptions {
  std::string grid;    // the grid file (bench_grid.hpp)
  std::string output;  // replaces the grid's output directory when not empty
  bool dry_run = false;
};

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// ado's measured properties that ft reports on every device, then ft's own.
constexpr const char* properties[] = {
    "train_runtime",           "train_samples_per_second",          "train_steps_per_second",
    "train_tokens_per_second", "train_tokens_per_gpu_per_second",   "dataset_tokens_per_second",
    "dataset_tokens_per_second_per_gpu", "cpu_compute_utilization", "cpu_memory_utilization",
    "mfu",                     "peak_memory_bytes",                 "max_rss_bytes",
    "state_bytes",             "measured_steps"};

// Every measured property, as results.csv's columns: the run's own, then the GPUs' sampled beside it.
std::vector<std::string> property_names() {
  std::vector<std::string> names(std::begin(properties), std::end(properties));
  for (const GpuProperty& g : no_gpu_properties()) names.push_back(g.name);
  return names;
}

// results.jsonl, read back when a grid resumes. A line torn by a kill is dropped.
class Results {
public:
  explicit Results(const fs::path& dir) : file_(dir / "results.jsonl") {
    std::ifstream in(file_, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    const std::size_t whole = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (whole < text.size()) fs::resize_file(file_, whole);
    std::size_t line = 0;
    for (std::size_t at = 0; at < whole;) {
      const std::size_t end = text.find('\n', at);
      ++line;
      json record = json::parse(text.substr(at, end - at), nullptr, false);
      if (record.is_discarded() || !record.is_object() || !record.contains("point") || !record["point"].is_string() ||
          !record.contains("repeat") || !record["repeat"].is_number_integer() || !record.contains("status") ||
          !record.contains("sets"))
        throw ft::Error(file_.string() + ":" + std::to_string(line) +
                        ": not a record of ftrun bench; move the file away to start the grid again");
      records_.push_back(std::move(record));
      at = end + 1;
    }
    out_.open(file_, std::ios::app);
    if (!out_) throw ft::Error(file_.string() + ": cannot be written");
  }

  // Whether this run of the point has its answer already: a measurement's
  // failures do not count (they are run again), a stability outcome does. A
  // record made with other assignments (the grid's [fixed] keys or the
  // point's translation changed) is not this point's.
  bool done(const GridPoint& p, std::int64_t repeat, bool stability) const {
    return std::any_of(records_.begin(), records_.end(), [&](const json& r) {
      return r["point"] == p.id() && r["repeat"] == repeat && r["sets"] == p.sets &&
             (stability || r["status"] != "failed");
    });
  }

  void append(json record) {
    out_ << record.dump() << "\n";
    out_.flush();
    records_.push_back(std::move(record));
  }

  const std::vector<json>& records() const { return records_; }

private:
  fs::path file_;
  std::vector<json> records_;
  std::ofstream out_;
};

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

// The summary record of a finished run's metrics.jsonl.
json summary_of(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  json summary;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("split", "") == "summary") summary = std::move(j);
  }
  return summary;
}

// The point's recipe as its run resolves it; nothing for one the run refuses.
std::optional<ft::recipe::Recipe> point_recipe(const Grid& grid, const GridPoint& p) {
  try {
    return ft::recipe::load<ft::recipe::Recipe>(grid.recipe, p.sets).recipe;
  } catch (const ft::Error&) {
    return std::nullopt;
  }
}

// What the estimate says the run's steps will take, per rank: what peak_memory_bytes measures.
std::optional<std::uint64_t> estimated_peak(const std::optional<ft::recipe::Recipe>& recipe) {
  if (!recipe) return std::nullopt;
  try {
    return ft::estimate::estimate_memory(*recipe).step_peak();
  } catch (const ft::Error&) {
    return std::nullopt;  // a policy the estimate has no model for
  }
}

// How many ranks of the point's run take a GPU of this machine: 0 on the CPU.
int gpu_ranks(const std::optional<ft::recipe::Recipe>& recipe) {
  if (!recipe || recipe->strategy.device != "cuda") return 0;
  return int(std::max<std::int64_t>(1, recipe->launch.nproc));
}

// "003-0-1f2e3d4c": the point's index and repeat for people, and a hash of
// its assignments, so that a run of an edited grid never takes the folder a
// record of the old grid points at.
std::string run_name(const GridPoint& p, std::int64_t repeat) {
  std::string assignments;
  for (const std::string& s : p.sets) assignments += s + "\n";
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%03zu-%lld-%s", p.index, (long long)repeat,
                ft::hex64(ft::fnv1a(assignments)).substr(0, 8).c_str());
  return buffer;
}

json base_record(const GridPoint& p, std::int64_t repeat) {
  json r;
  r["point"] = p.id();
  r["index"] = p.index;
  r["repeat"] = repeat;
  r["sets"] = p.sets;
  json entity = json::object();
  for (const auto& [key, value] : p.entity) entity[key] = value;
  r["entity"] = entity;
  return r;
}

// One run of a point, classified.
json run_point(const Grid& grid, const GridPoint& p, std::int64_t repeat, std::int64_t attempt) {
  const std::string name = run_name(p, repeat);
  const fs::path dir = grid.output / "runs" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> argv{self_path(), "train", grid.recipe.string()};
  for (const std::string& s : p.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--set", "output_dir=" + dir.string()});
  const std::optional<ft::recipe::Recipe> recipe = point_recipe(grid, p);

  // ado's gpu_* properties: sampled while the run goes when it takes GPUs, 0 when it takes none.
  std::vector<GpuProperty> gpu = no_gpu_properties();
  std::unique_ptr<GpuMonitor> monitor;
  std::string gpu_unmeasured;
  if (const int ranks = gpu_ranks(recipe); ranks > 0) try {
      monitor = std::make_unique<GpuMonitor>(ranks, std::chrono::milliseconds(200));
    } catch (const ft::Error& e) {
      gpu_unmeasured = e.what();
    }
  const ChildResult child = run_child(argv, dir / "stdout.txt", dir / "stderr.txt", grid.point_timeout_seconds);
  if (monitor) try {
      gpu = monitor->finish();
    } catch (const ft::Error& e) {
      gpu_unmeasured = e.what();
    }

  json r = base_record(p, repeat);
  r["attempt"] = attempt;
  r["run"] = "runs/" + name;
  r["seconds"] = child.seconds;
  r["exit_code"] = child.exit_code;
  const std::string error = error_line(dir / "stderr.txt", "ftrun:");
  auto invalid = [&](const char* outcome) {
    r["status"] = "invalid";
    r["is_valid"] = false;
    r["outcome"] = outcome;
    r["reason"] = error;
  };
  auto failed = [&](const std::string& why) {
    r["status"] = "failed";
    r["outcome"] = "other_error";
    r["reason"] = why;
  };
  if (child.timed_out) {
    failed("ended after point_timeout_seconds = " + std::to_string(grid.point_timeout_seconds));
  } else if (child.signal) {
    failed("killed by signal " + std::to_string(child.signal) + (error.empty() ? "" : ": " + error));
  } else if (child.exit_code == ExitCode::out_of_memory) {
    invalid("oom");
  } else if (child.exit_code == ExitCode::bad_input || child.exit_code == ExitCode::plugin_refused) {
    invalid("other_error");  // ft refuses the combination: running it again cannot help
  } else if (child.exit_code != ExitCode::ok) {
    failed(error.empty() ? "exit code " + std::to_string(child.exit_code) : error);
  } else if (const json summary = summary_of(dir); summary.is_null()) {
    failed("the run finished without a summary in its metrics.jsonl");
  } else {
    r["status"] = "valid";
    r["is_valid"] = true;
    r["outcome"] = "no_error";
    json measured = json::object();
    for (const char* key : properties)
      if (summary.contains(key)) measured[key] = summary[key];
    if (gpu_unmeasured.empty())
      for (const GpuProperty& g : gpu) measured[g.name] = g.value;
    else
      r["gpu_properties_unmeasured"] = gpu_unmeasured;
    r["properties"] = measured;
  }
  if (r["status"] != "failed")
    if (auto estimate = estimated_peak(recipe)) r["estimated_peak_memory_bytes"] = *estimate;
  return r;
}

// The records of this grid's points, by point and repeat; the last answer of each run wins.
std::map<std::pair<std::size_t, std::int64_t>, json> finished(const Grid& grid, const Results& results,
                                                              bool with_failures) {
  std::map<std::string, const GridPoint*> by_id;
  for (const GridPoint& p : grid.points) by_id[p.id()] = &p;
  std::map<std::pair<std::size_t, std::int64_t>, json> out;
  for (const json& r : results.records()) {
    auto it = by_id.find(r["point"].get<std::string>());
    if (it == by_id.end() || r["sets"] != it->second->sets || (!with_failures && r["status"] == "failed")) continue;
    out[{it->second->index, r["repeat"].get<std::int64_t>()}] = r;
  }
  return out;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string number_text(const json& value) { return value.is_null() ? "" : value.dump(); }

void write_results_csv(const Grid& grid, const Results& results) {
  std::string text = "point,repeat";
  for (const std::string& key : grid.keys) text += "," + csv_field(key);
  text += ",is_valid,reason";
  for (const std::string& key : property_names()) text += "," + key;
  text += ",estimated_peak_memory_bytes\n";
  for (const auto& [at, r] : finished(grid, results, false)) {
    text += std::to_string(at.first) + "," + std::to_string(at.second);
    for (const std::string& key : grid.keys) text += "," + csv_field(r["entity"][key].get<std::string>());
    text += std::string(",") + (r["is_valid"].get<bool>() ? "true" : "false") + "," +
            csv_field(r.value("reason", ""));
    const json& measured = r.contains("properties") ? r["properties"] : json::object();
    for (const std::string& key : property_names())
      text += "," + number_text(measured.contains(key) ? measured[key] : json());
    text += "," + number_text(r.contains("estimated_peak_memory_bytes") ? r["estimated_peak_memory_bytes"] : json());
    text += "\n";
  }
  write_atomically(grid.output / "results.csv", text);
}

void write_stability_csv(const Grid& grid, const Results& results) {
  std::map<std::size_t, std::map<std::string, int>> outcomes;
  for (const auto& [at, r] : finished(grid, results, true)) ++outcomes[at.first][r["outcome"].get<std::string>()];
  std::string text = "point";
  for (const std::string& key : grid.keys) text += "," + csv_field(key);
  // f_gpu_oom as ado spells it; f_oom, its earlier name here, repeats it.
  text += ",is_valid,runs,f_gpu_oom,f_other_error,f_no_error,f_oom\n";
  for (const GridPoint& p : grid.points) {
    text += std::to_string(p.index);
    for (const auto& [key, value] : p.entity) text += "," + csv_field(value);
    const auto& counts = outcomes[p.index];
    if (!p.invalid.empty()) {
      text += ",false,0,,,,\n";  // never run: ado measures no stability for it
      continue;
    }
    int runs = 0;
    for (const auto& [outcome, n] : counts) runs += n;
    auto fraction = [&](const char* outcome) {
      const auto it = counts.find(outcome);
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.4g", runs ? double(it == counts.end() ? 0 : it->second) / runs : 0.0);
      return std::string(buffer);
    };
    text += ",true," + std::to_string(runs) + "," + fraction("oom") + "," + fraction("other_error") + "," +
            fraction("no_error") + "," + fraction("oom") + "\n";
  }
  write_atomically(grid.output / "stability.csv", text);
}

// A configuration as a legend names it: "number_gpus=2 precision=bf16-mixed", the key without its section.
std::string label(const GridPoint& p, const std::string& without = "") {
  std::string out;
  for (const auto& [key, value] : p.entity)
    if (key != without) out += (out.empty() ? "" : " ") + key.substr(key.rfind('.') + 1) + "=" + value;
  return out.empty() ? "all" : out;
}

// tokens/s and peak memory against batch size, one line per configuration; seconds per step along each run.
void write_plots(const Grid& grid, const Results& results) {
  const auto runs = finished(grid, results, false);
  std::string batch_key;
  for (const char* key : {"batch_size", "train.per_device_train_batch_size"})
    if (std::find(grid.keys.begin(), grid.keys.end(), key) != grid.keys.end()) batch_key = key;

  if (!batch_key.empty()) {
    // configuration -> batch -> the valid repeats' values
    std::map<std::string, std::map<double, std::vector<double>>> tokens, peak, estimate;
    for (const auto& [at, r] : runs) {
      if (r["status"] != "valid") continue;
      const GridPoint& p = grid.points[at.first];
      const double batch = std::stod(*p.value(batch_key));
      const std::string line = label(p, batch_key);
      tokens[line][batch].push_back(r["properties"].value("train_tokens_per_second", 0.0));
      peak[line][batch].push_back(r["properties"].value("peak_memory_bytes", 0.0) / (1 << 20));
      if (r.contains("estimated_peak_memory_bytes"))
        estimate[line][batch].push_back(r["estimated_peak_memory_bytes"].get<double>() / (1 << 20));
    }
    auto series = [](const std::string& label, const std::map<double, std::vector<double>>& by_batch, bool dashed,
                     int colour) {
      ChartSeries s{label, {}, {}, dashed, colour};
      for (const auto& [batch, values] : by_batch) {
        double sum = 0;
        for (double v : values) sum += v;
        s.x.push_back(batch);
        s.y.push_back(sum / double(values.size()));
      }
      return s;
    };
    Chart throughput{"Throughput against batch size", batch_key, "train_tokens_per_second", {}, true};
    Chart memory{"Peak memory per rank against batch size (dashed: ftrun estimate)", batch_key, "MiB", {}, true};
    int colour = 0;
    for (const auto& [line, by_batch] : tokens) {
      throughput.series.push_back(series(line, by_batch, false, colour));
      memory.series.push_back(series(line, peak[line], false, colour));
      if (estimate.count(line)) memory.series.push_back(series(line + " (estimate)", estimate[line], true, colour));
      ++colour;
    }
    write_svg_line_chart(throughput, (grid.output / "throughput.svg").string());
    write_svg_line_chart(memory, (grid.output / "memory.svg").string());
  }

  Chart iterations{"Time per iteration along each run", "step", "seconds_per_step", {}, true};
  for (const auto& [at, r] : runs) {
    if (r["status"] != "valid" || at.second != 0) continue;
    ChartSeries s{label(grid.points[at.first]), {}, {}, false, -1};
    std::ifstream in(grid.output / r["run"].get<std::string>() / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || j.value("split", "") != "train" || !j.contains("seconds_per_step")) continue;
      s.x.push_back(j["step"].get<double>());
      s.y.push_back(j["seconds_per_step"].get<double>());
    }
    iterations.series.push_back(std::move(s));
  }
  write_svg_line_chart(iterations, (grid.output / "iterations.svg").string());
}

std::string describe(const json& r) {
  if (r["status"] == "valid") {
    const json& m = r["properties"];
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, "valid  %.4g tokens/s  peak %s", m.value("train_tokens_per_second", 0.0),
                  ft::format_bytes(m.value("peak_memory_bytes", std::uint64_t(0))).c_str());
    std::string text = buffer;
    if (r.contains("estimated_peak_memory_bytes"))
      text += " (estimate " + ft::format_bytes(r["estimated_peak_memory_bytes"].get<std::uint64_t>()) + ")";
    return text;
  }
  return r["status"].get<std::string>() + " (" + r["outcome"].get<std::string>() + "): " +
         r.value("reason", std::string());
}

}  // namespace

int run_bench(const BenchOptions& options) {
  try {
    const Grid grid = load_grid(options.grid, options.output);
    const std::int64_t runs = std::int64_t(grid.points.size()) * grid.repeats;
    if (options.dry_run) {
      std::printf("ftrun bench: %s, %zu points x %lld repeats, base recipe %s, results in %s\n",
                  grid.experiment.c_str(), grid.points.size(), (long long)grid.repeats, grid.recipe.c_str(),
                  grid.output.c_str());
      for (const GridPoint& p : grid.points) {
        std::printf("  %3zu  %s%s\n", p.index, p.id().c_str(), p.invalid.empty() ? "" : ("  invalid: " + p.invalid).c_str());
        if (p.invalid.empty()) {
          std::string sets;
          for (const std::string& s : p.sets) sets += " --set " + s;
          std::printf("       ftrun train %s%s\n", grid.recipe.c_str(), sets.c_str());
        }
      }
      return ExitCode::ok;
    }
    fs::create_directories(grid.output);
    Results results(grid.output);
    std::int64_t done = 0, failed = 0;
    for (const GridPoint& p : grid.points)
      for (std::int64_t repeat = 0; repeat < grid.repeats; ++repeat) done += results.done(p, repeat, grid.stability());
    std::printf("ftrun bench: %s, %zu points x %lld repeats = %lld runs, results in %s%s\n", grid.experiment.c_str(),
                grid.points.size(), (long long)grid.repeats, (long long)runs, grid.output.c_str(),
                done ? (", resuming: " + std::to_string(done) + " done").c_str() : "");
    std::fflush(stdout);

    ft::Progress bar("bench", long(runs));
    bar.update(long(done));
    for (const GridPoint& p : grid.points) {
      for (std::int64_t repeat = 0; repeat < grid.repeats; ++repeat) {
        if (results.done(p, repeat, grid.stability())) continue;
        json r;
        if (!p.invalid.empty()) {
          r = base_record(p, repeat);
          r["status"] = "invalid";
          r["is_valid"] = false;
          r["outcome"] = "not_run";
          r["reason"] = p.invalid;
          results.append(r);
        } else {
          const std::int64_t attempts = grid.stability() ? 1 : grid.retries + 1;
          for (std::int64_t attempt = 1; attempt <= attempts; ++attempt) {
            r = run_point(grid, p, repeat, attempt);
            results.append(r);
            if (r["status"] != "failed" || attempt == attempts) break;
            std::fprintf(stderr, "\r\033[K");
            std::printf("[%lld/%lld] %s: %s; trying again\n", (long long)done + 1, (long long)runs, p.id().c_str(),
                        describe(r).c_str());
          }
        }
        ++done;
        failed += r["status"] == "failed" && !grid.stability();
        std::printf("[%lld/%lld] %s%s: %s\n", (long long)done, (long long)runs, p.id().c_str(),
                    grid.repeats > 1 ? (" (repeat " + std::to_string(repeat) + ")").c_str() : "",
                    describe(r).c_str());
        std::fflush(stdout);
        bar.update(long(done));
      }
    }
    bar.finish();
    write_results_csv(grid, results);
    if (grid.stability()) write_stability_csv(grid, results);
    write_plots(grid, results);
    std::printf("ftrun bench: results in %s (results.csv, results.jsonl%s, throughput.svg, memory.svg, "
                "iterations.svg)\n",
                grid.output.c_str(), grid.stability() ? ", stability.csv" : "");
    if (failed > 0) {
      std::fprintf(stderr, "ftrun bench: %lld run(s) failed after %lld retries; run the grid again to retry them\n",
                   (long long)failed, (long long)grid.retries);
      return ExitCode::failed;
    }
    return ExitCode::ok;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ftrun bench: %s\n", e.what());
    return ExitCode::bad_input;
  }
}

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* command = app.add_subcommand("bench", "Run every point of an experiment grid (TOML) as its own training run: "
                                            "the properties, validity and stability of ado's SFTTrainer actuator, CSV/JSONL and plots");
  command->add_option("grid", o->grid, "Grid file (TOML): base recipe, [fixed] and [space] keys")->required();
  command->add_option("--output", o->output, "Results directory (default: the grid's `output`)");
  command->add_flag("--dry-run", o->dry_run, "List the points, their validity and commands; run nothing");
  return {command, [o] { return run_bench(*o); }};
}

}  // namespace ftrun
