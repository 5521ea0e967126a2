// ftrun schedule: a recipe's pipeline schedule as a timeline, one row per
// pipeline rank. By default the schedule runs on the partition's estimated
// costs (simulated); --measured draws a step a real run recorded with
// pipeline.timeline = true, so the bubbles drawn are the ones measured. The
// terminal gets a text picture and each rank's bubble; --svg writes a drawing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include <ft/models/read.hpp>
#include <ft/parallel/pipeline_timeline.hpp>
#include <ft/recipe/load.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_reading.hpp"

namespace ftrun {

struct ScheduleOptions {
  std::string recipe;
  std::vector<std::string> sets;  // --set section.key=value
  bool measured = false;          // draw a recorded step instead of the simulated schedule
  long step = 0;                  // the recorded step to draw; 0: the last one
  int replica = 0;                // whose pipe, under pipeline x data parallelism
  std::string svg;                // write the drawing here
  std::vector<std::string> plugins;  // --plugin FILE: for a model a plugin's family reads
};

namespace {

namespace fs = std::filesystem;
using ft::parallel::PipeActivity;
using ft::parallel::PipeInterval;
using ft::parallel::PipeTimeline;

struct Drawn {
  PipeTimeline timeline;
  std::string source;  // what the timeline is: "simulated ..." or "measured ..."
  const char* unit_name = "";
};

// Step `step` (the last one every rank recorded when 0) of replica `replica`,
// from <output_dir>/timeline/.
Drawn read_measured(const fs::path& dir, int ranks, long step, int replica) {
  if (!fs::is_directory(dir))
    throw ft::Error(dir.string() + ": no timeline here; train with --set pipeline.timeline=true first");
  // records[step][pipe rank]
  std::map<long, std::map<int, nlohmann::json>> records;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".jsonl") continue;
    std::ifstream in(e.path());
    std::string line;
    for (long number = 1; std::getline(in, line); ++number) {
      try {
        nlohmann::json j = nlohmann::json::parse(line);
        if (j.at("replica").get<int>() != replica) continue;
        const long s = j.at("step").get<long>();
        const int pipe_rank = j.at("pipe_rank").get<int>();
        records[s][pipe_rank] = std::move(j);  // a resumed run's last
      } catch (const nlohmann::json::exception& x) {
        throw ft::Error(e.path().string() + ":" + std::to_string(number) + ": not a timeline record (" + x.what() + ")");
      }
    }
  }
  if (step == 0)
    for (const auto& [s, by_rank] : records)
      if (int(by_rank.size()) == ranks) step = s;
  if (step == 0)
    throw ft::Error(dir.string() + ": no step recorded by all " + std::to_string(ranks) +
                    " pipeline ranks of replica " + std::to_string(replica));
  const auto found = records.find(step);
  if (found == records.end() || int(found->second.size()) != ranks)
    throw ft::Error(dir.string() + ": step " + std::to_string(step) + " was not recorded by all " +
                    std::to_string(ranks) + " pipeline ranks of replica " + std::to_string(replica));
  Drawn d;
  for (int r = 0; r < ranks; ++r) d.timeline.ranks.push_back(ft::parallel::timeline_events(found->second.at(r)));
  // Times from the step's first interval, in milliseconds.
  const double begin = d.timeline.begin();
  for (auto& rank : d.timeline.ranks)
    for (PipeInterval& i : rank) {
      i.start = (i.start - begin) * 1e3;
      i.end = (i.end - begin) * 1e3;
    }
  d.source = "measured at step " + std::to_string(step) + " (" + dir.string() + ")";
  d.unit_name = "ms";
  return d;
}

char letter_of(PipeActivity a) {
  switch (a) {
    case PipeActivity::forward: return 'F';
    case PipeActivity::backward: return 'B';
    case PipeActivity::weights: return 'W';
    case PipeActivity::send: return '>';
    case PipeActivity::wait: return '.';
  }
  return ' ';
}

// One line per rank, `width` columns over the step: F, B, W for passes, '.'
// waiting on a peer, ' ' nothing to run.
std::string text_picture(const PipeTimeline& t, int width) {
  const double begin = t.begin(), span = std::max(t.end() - begin, 1e-12);
  std::ostringstream os;
  for (int r = 0; r < int(t.ranks.size()); ++r) {
    std::string row(std::size_t(width), ' ');
    for (const PipeInterval& i : t.ranks[std::size_t(r)]) {
      if (i.activity == PipeActivity::send) continue;
      const int a = int(std::floor((i.start - begin) / span * width)), b = int(std::ceil((i.end - begin) / span * width));
      for (int c = std::max(a, 0); c < std::min(b, width); ++c)
        if (ft::parallel::is_pass(i.activity) || row[std::size_t(c)] == ' ') row[std::size_t(c)] = letter_of(i.activity);
    }
    char bubble[32];
    std::snprintf(bubble, sizeof bubble, "  bubble %4.1f%%", 100 * t.bubble(r));
    os << "  rank " << r << " |" << row << "|" << bubble << "\n";
  }
  return os.str();
}

// A figure for a label: at most 3 significant digits.
std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g", v);
  return s;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

// An SVG drawing: a row per rank, a box per pass labelled with its
// micro-batch (and chunk when interleaved), waits hatched in red, a time axis.
std::string svg_picture(const Drawn& d, const std::string& title, bool chunks) {
  const PipeTimeline& t = d.timeline;
  const double left = 70, right = 110, top = 50, row = 34, plot = 1000;
  const int ranks = int(t.ranks.size());
  const double span = std::max(t.end() - t.begin(), 1e-12), x0 = t.begin();
  const double width = left + plot + right, height = top + row * ranks + 60;
  auto x = [&](double time) { return left + (time - x0) / span * plot; };
  const std::map<PipeActivity, const char*> fill = {{PipeActivity::forward, "#4e79a7"},
                                                    {PipeActivity::backward, "#59a14f"},
                                                    {PipeActivity::weights, "#f28e2b"},
                                                    {PipeActivity::send, "#333333"},
                                                    {PipeActivity::wait, "#e15759"}};
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << escape_xml(title) << "</text>\n"
     << "<text x=\"" << left << "\" y=\"38\" fill=\"#555\">" << escape_xml(d.source) << "</text>\n";
  for (int r = 0; r < ranks; ++r) {
    const double y = top + row * r;
    os << "<text x=\"8\" y=\"" << y + row / 2 + 4 << "\">rank " << r << "</text>\n";
    os << "<rect x=\"" << left << "\" y=\"" << y + 2 << "\" width=\"" << plot << "\" height=\"" << row - 4
       << "\" fill=\"#f4f4f4\"/>\n";
    for (const PipeInterval& i : t.ranks[std::size_t(r)]) {
      const double a = x(i.start), w = std::max(x(i.end) - a, 0.5);
      const bool thin = !ft::parallel::is_pass(i.activity);
      os << "<rect x=\"" << a << "\" y=\"" << (thin ? y + row - 8 : y + 4) << "\" width=\"" << w << "\" height=\""
         << (thin ? 4 : row - 8) << "\" fill=\"" << fill.at(i.activity) << "\"" << (thin ? " fill-opacity=\"0.7\"" : "")
         << "><title>" << ft::parallel::activity_letter(i.activity) << " micro-batch " << i.micro_batch << " chunk "
         << i.chunk << ": " << i.end - i.start << " " << d.unit_name << "</title></rect>\n";
      if (!thin && w > 14) {
        const std::string label = std::to_string(i.micro_batch) + (chunks ? "." + std::to_string(i.chunk) : "");
        os << "<text x=\"" << a + w / 2 << "\" y=\"" << y + row / 2 + 4
           << "\" text-anchor=\"middle\" fill=\"white\">" << label << "</text>\n";
      }
    }
    os << "<text x=\"" << left + plot + 8 << "\" y=\"" << y + row / 2 + 4 << "\">bubble " << number(100 * t.bubble(r))
       << "%</text>\n";
  }
  // Time axis: ticks at a round step.
  const double axis = top + row * ranks + 6;
  const double raw = span / 8, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double tick = raw / magnitude < 2 ? magnitude : raw / magnitude < 5 ? 2 * magnitude : 5 * magnitude;
  os << "<line x1=\"" << left << "\" y1=\"" << axis << "\" x2=\"" << left + plot << "\" y2=\"" << axis
     << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= span * 1.0001; v += tick)
    os << "<text x=\"" << x(x0 + v) << "\" y=\"" << axis + 14 << "\" text-anchor=\"middle\">" << number(v) << "</text>\n";
  os << "<text x=\"" << left + plot + 8 << "\" y=\"" << axis + 14 << "\">" << d.unit_name << "</text>\n";
  // Legend.
  double lx = left;
  const double ly = axis + 34;
  for (const auto& [activity, name] : {std::pair{PipeActivity::forward, "forward"},
                                       {PipeActivity::backward, "backward"},
                                       {PipeActivity::weights, "weight gradients"},
                                       {PipeActivity::send, "send"},
                                       {PipeActivity::wait, "waiting for a peer"}}) {
    os << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\"" << fill.at(activity)
       << "\"/><text x=\"" << lx + 14 << "\" y=\"" << ly << "\">" << name << "</text>\n";
    lx += 40 + 7.0 * double(std::string(name).size());
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace

int run_schedule(const ScheduleOptions& options) {
  try {
    const auto loaded = ft::recipe::load<ft::recipe::Recipe>(options.recipe, options.sets);
    const ft::recipe::Recipe& r = loaded.recipe;
    if (r.strategy.parallelism != "pipeline")
      throw loaded.error("strategy.parallelism", "is \"" + r.strategy.parallelism +
                                                     "\"; ftrun schedule draws the schedules of \"pipeline\"");
    const ft::parallel::PipePartition p =
        ft::parallel::plan_pipeline(r, read_model(r.model.path, options.plugins).spec.config, r.launch.nproc);
    const int m = int(ft::recipe::pipeline_microbatches(r));
    const auto schedule = ft::parallel::pipe_schedule_from_name(r.pipeline.schedule);
    Drawn d;
    if (options.measured) {
      d = read_measured(fs::path(r.output_dir) / "timeline", p.ranks, options.step, options.replica);
    } else {
      d.timeline = ft::parallel::simulate_pipeline(schedule, p, m);
      d.source = "simulated on estimated costs (1 = the costliest chunk's forward)";
      d.unit_name = "x forward";
    }
    std::cout << ft::parallel::describe_pipeline(r, p, r.launch.nproc);
    std::cout << "timeline, " << d.source << ":\n" << text_picture(d.timeline, 72);
    char mean[96];
    std::snprintf(mean, sizeof mean, "bubble %.1f%% (ranks' mean); 1f1b's (p - 1) / (m + p - 1) = %.1f%%\n",
                  100 * d.timeline.mean_bubble(), 100.0 * (p.ranks - 1) / (m + p.ranks - 1));
    std::cout << mean;
    if (!options.svg.empty()) {
      std::ostringstream title;
      title.setf(std::ios::fixed);
      title.precision(1);
      title << r.pipeline.schedule << ": " << m << " micro-batches on " << p.ranks << " ranks, bubble "
            << 100 * d.timeline.mean_bubble() << "%";
      std::ofstream out(options.svg);
      out << svg_picture(d, title.str(), p.stages_per_rank > 1);
      if (!out) throw ft::Error(options.svg + ": cannot be written");
      std::cout << "wrote " << options.svg << "\n";
    }
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

Command add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App* command = app.add_subcommand("schedule", "Draw a recipe's pipeline schedule as a timeline: simulated, or a "
                                                  "step a run recorded (pipeline.timeline = true)");
  add_recipe_options(command, o->recipe, o->sets);
  command->add_flag("--measured", o->measured,
                     "Draw a step recorded in <output_dir>/timeline/ instead of the simulated schedule");
  command->add_option("--step", o->step, "The recorded step to draw (default: the last)")
      ->check(CLI::PositiveNumber);
  command->add_option("--replica", o->replica, "Whose pipe to draw under pipeline x data parallelism")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--svg", o->svg, "Also write the timeline as an SVG drawing to this file");
  add_family_plugins(command, o->plugins);
  return {command, [o] { return run_schedule(*o); }};
}

}  // namespace ftrun
