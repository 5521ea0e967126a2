#pragma once
// Where a run's numbers go: one JSON object per logged step in
// <output_dir>/metrics.jsonl, the same numbers as TensorBoard scalars under
// <output_dir>/runs/ ("train/loss", "eval/loss", ...), a plain line on stdout
// per logged step, and a progress bar on stderr when it is a terminal.
//
// The throughput figures follow the definitions of ado's SFTTrainer actuator:
//   train_tokens_per_second    tokens processed per second, padding included
//   dataset_tokens_per_second  tokens of the dataset per second, padding excluded
// and mfu is model FLOPs per second over this machine's measured GEMM peak.
//
// In a job of several ranks only rank 0's log is `active`; the others' write,
// print and draw nothing.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/progress.hpp"
#include "ft/report/tensorboard.hpp"

namespace ft::report {

class MetricsLog {
public:
  // A run killed while it wrote a record leaves part of a line at the end of
  // metrics.jsonl. That record was never whole, so it goes before a resumed
  // run appends, rather than joining the next record into a line no reader
  // can parse.
  static void drop_partial_record(const std::filesystem::path& file) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec || size == 0) return;
    std::ifstream in(file, std::ios::binary);
    std::uintmax_t end = size;  // the file's length up to and including its last newline
    std::string chunk;
    while (end > 0) {
      const std::uintmax_t from = end > 4096 ? end - 4096 : 0;
      chunk.resize(std::size_t(end - from));
      in.seekg(std::streamoff(from));
      if (!in.read(chunk.data(), std::streamsize(chunk.size())))
        throw Error(file.string() + ": cannot be read back to drop a partial record");
      if (const auto newline = chunk.rfind('\n'); newline != std::string::npos) {
        end = from + newline + 1;
        break;
      }
      end = from;
    }
    if (end == size) return;
    std::filesystem::resize_file(file, end, ec);
    if (ec) throw Error(file.string() + ": cannot drop the partial record a killed run left (" + ec.message() + ")");
  }

  MetricsLog(const std::filesystem::path& output_dir, long total_steps, long first_step, bool active = true)
      : active_(active), progress_("train", active ? total_steps : 0), terminal_(::isatty(STDERR_FILENO) != 0) {
    if (!active_) return;
    drop_partial_record(output_dir / "metrics.jsonl");
    jsonl_.open(output_dir / "metrics.jsonl", std::ios::app);
    if (!jsonl_) throw Error((output_dir / "metrics.jsonl").string() + ": cannot be written");
    tensorboard_ = std::make_unique<TensorBoardWriter>(output_dir / "runs");
    progress_.update(first_step);
  }

  // One record: every numeric field also becomes the scalar "<group>/<field>".
  // `quiet`: not printed (per-rank figures go to the files only).
  void log(const std::string& group, nlohmann::ordered_json record, bool quiet = false) {
    if (!active_) return;
    const std::int64_t step = record.at("step").get<std::int64_t>();
    record["split"] = group;
    jsonl_ << record.dump() << "\n";
    jsonl_.flush();
    for (auto it = record.begin(); it != record.end(); ++it)
      if (it->is_number() && it.key() != "step") tensorboard_->add_scalar(group + "/" + it.key(), it->get<double>(), step);
    tensorboard_->flush();
    if (!quiet) line(group, record);
  }

  void progress(long step, const std::string& status) {
    if (active_) progress_.update(step, status);
  }

  // A message on stdout that does not tear the progress bar.
  void say(const std::string& text) {
    if (!active_) return;
    if (terminal_) std::fputs("\r\033[K", stderr);
    std::fputs((text + "\n").c_str(), stdout);
    std::fflush(stdout);
  }

  void finish() {
    if (active_) progress_.finish();
  }

private:
  void line(const std::string& group, const nlohmann::ordered_json& record) {
    std::string text = group;
    char buffer[64];
    for (auto it = record.begin(); it != record.end(); ++it) {
      if (it.key() == "split") continue;
      if (it->is_number_integer()) std::snprintf(buffer, sizeof buffer, "%lld", (long long)it->get<std::int64_t>());
      else if (it->is_number()) std::snprintf(buffer, sizeof buffer, "%.4g", it->get<double>());
      else continue;
      text += "  " + it.key() + " " + buffer;
    }
    say(text);
  }

  bool active_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  Progress progress_;
  bool terminal_;
};

}  // namespace ft::report
