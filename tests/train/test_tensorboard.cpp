// TensorBoardWriter: CRC-32C against published check values, the event file
// parsed by a decoder written here (not the writer's encoder), and the same file
// read by the real TensorBoard loader through tools/read_tensorboard.py.
#include <doctest/doctest.h>

#include "support/skip.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <ft/report/tensorboard.hpp>

namespace test_tensorboard {

namespace fs = std::filesystem;
using ft::report::TensorBoardWriter;

namespace {

// A fresh, empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ft-tensorboard-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(s.at(at + i))} << (8 * i);
  return v;
}

// TFRecord masking, written out here from the format's definition.
std::uint32_t masked(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// Splits a TFRecord file into its records' data, checking the framing on the way.
std::vector<std::string> records_of(const std::string& file) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < file.size()) {
    REQUIRE(at + 12 <= file.size());
    const std::uint64_t length = le(file, at, 8);
    CHECK(le(file, at + 8, 4) == masked(ft::report::crc32c(file.data() + at, 8)));
    REQUIRE(at + 12 + length + 4 <= file.size());
    std::string data = file.substr(at + 12, length);
    CHECK(le(file, at + 12 + length, 4) == masked(ft::report::crc32c(data.data(), data.size())));
    out.push_back(std::move(data));
    at += 12 + length + 4;
  }
  CHECK(at == file.size());
  return out;
}

// A minimal protobuf reader: walks one message's fields.
struct Field {
  std::uint32_t number = 0, wire = 0;
  std::uint64_t scalar = 0;  // varint value, or the raw little-endian bits of fixed64/fixed32
  std::string bytes;         // length-delimited payload
};

std::vector<Field> fields_of(const std::string& msg) {
  std::vector<Field> out;
  std::size_t at = 0;
  auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(at < msg.size());
      REQUIRE(shift < 64);
      const auto b = static_cast<unsigned char>(msg[at++]);
      v |= std::uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < msg.size()) {
    const std::uint64_t key = varint();
    Field f;
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire = static_cast<std::uint32_t>(key & 7);
    if (f.wire == 0) {
      f.scalar = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      REQUIRE(at + n <= msg.size());
      f.scalar = le(msg, at, n);
      at += n;
    } else {
      REQUIRE(f.wire == 2);
      const std::uint64_t n = varint();
      REQUIRE(at + n <= msg.size());
      f.bytes = msg.substr(at, n);
      at += n;
    }
    out.push_back(std::move(f));
  }
  return out;
}

struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : fields_of(data)) {
    if (f.number == 1) {
      CHECK(f.wire == 1);
      double d;
      std::memcpy(&d, &f.scalar, 8);
      e.wall_time = d;
    } else if (f.number == 2) {
      CHECK(f.wire == 0);
      e.step = static_cast<std::int64_t>(f.scalar);
    } else if (f.number == 3) {
      CHECK(f.wire == 2);
      e.file_version = f.bytes;
    } else if (f.number == 5) {
      CHECK(f.wire == 2);
      for (const Field& v : fields_of(f.bytes)) {
        REQUIRE(v.number == 1);
        REQUIRE(v.wire == 2);
        std::string tag;
        float value = 0;
        bool has_value = false;
        for (const Field& g : fields_of(v.bytes)) {
          if (g.number == 1 && g.wire == 2) tag = g.bytes;
          if (g.number == 2 && g.wire == 5) {
            const auto bits = static_cast<std::uint32_t>(g.scalar);
            std::memcpy(&value, &bits, 4);
            has_value = true;
          }
        }
        CHECK(has_value);
        e.values.emplace_back(tag, value);
      }
    } else {
      FAIL("unexpected Event field ", f.number);
    }
  }
  return e;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The points every case writes, and what a reader must find.
const std::map<std::string, std::vector<std::pair<std::int64_t, float>>> kExpected = {
    {"train/loss", {{1, 2.5f}, {2, 2.25f}}},
    {"train/learning_rate", {{1, static_cast<float>(1e-3)}}},
};

void write_points(TensorBoardWriter& w) {
  w.add_scalar("train/loss", 2.5, 1);
  w.add_scalar("train/learning_rate", 1e-3, 1);
  w.add_scalar("train/loss", 2.25, 2);
  w.flush();
}

// Runs a shell command, returning (exit status, stdout).
std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

TEST_CASE("crc32c matches the published CRC-32C check values") {
  const char* digits = "123456789";
  CHECK(ft::report::crc32c(digits, 9) == 0xE3069283u);
  const unsigned char zeros[32] = {};
  CHECK(ft::report::crc32c(zeros, 32) == 0x8A9136AAu);
  // Extending a CRC equals the CRC of the concatenation.
  CHECK(ft::report::crc32c(digits + 4, 5, ft::report::crc32c(digits, 4)) == 0xE3069283u);
  CHECK(ft::report::crc32c(digits, 0) == 0u);
  CHECK(ft::report::mask_crc32c(0xE3069283u) == masked(0xE3069283u));
}

TEST_CASE("TensorBoardWriter writes framed Event records that decode to the scalars written") {
  TempDir dir("records");
  const double before = unix_now();
  fs::path file;
  {
    TensorBoardWriter w(dir.path / "run");
    file = w.path();
    CHECK(file.parent_path() == dir.path / "run");
    const std::string name = file.filename().string();
    CHECK(name.rfind("events.out.tfevents.", 0) == 0);
    CHECK(name.find("." + std::to_string(::getpid()) + ".") != std::string::npos);
    // A second writer in the same directory gets its own file.
    TensorBoardWriter other(dir.path / "run");
    CHECK(other.path() != file);
    // A moved writer keeps writing to the same file.
    TensorBoardWriter moved = std::move(w);
    CHECK(moved.path() == file);
    write_points(moved);
  }
  const double after = unix_now();

  const std::vector<std::string> records = records_of(read_all(file));
  REQUIRE(records.size() == 4);
  const Event first = decode_event(records[0]);
  CHECK(first.file_version == "brain.Event:2");
  CHECK(first.step == 0);
  CHECK(first.values.empty());

  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> found;
  double last_time = first.wall_time;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Event e = decode_event(records[i]);
    CHECK(e.wall_time >= before - 1.0);
    CHECK(e.wall_time <= after + 1.0);
    CHECK(e.wall_time >= last_time);
    last_time = e.wall_time;
    if (i == 0) continue;
    CHECK(e.file_version.empty());
    REQUIRE(e.values.size() == 1);
    found[e.values[0].first].emplace_back(e.step, e.values[0].second);
  }
  CHECK(found == kExpected);
}

TEST_CASE("TensorBoardWriter names the path it cannot create") {
  TempDir dir("errors");
  fs::create_directories(dir.path);
  const fs::path blocker = dir.path / "a-file";
  std::ofstream(blocker) << "x";
  try {
    TensorBoardWriter w(blocker / "logs");
    FAIL("a log directory under a regular file was accepted");
  } catch (const ft::Error& e) {
    CHECK(std::string(e.what()).find((blocker / "logs").string()) != std::string::npos);
  }
}

TEST_CASE("TensorBoard's own event file loader reads the writer's scalars") {
  const char* python = std::getenv("FT_PYTHON");
  if (!python || !*python) {
    return ft::test::skip("FT_PYTHON is not set (it names a Python with the `tensorboard` package)");
  }
  if (run(quoted(python) + " -c 'import tensorboard' >/dev/null 2>&1").first != 0) {
    return ft::test::skip(std::string(python) + " cannot `import tensorboard` (pip install tensorboard)");
  }
  TempDir dir("loader");
  {
    TensorBoardWriter w(dir.path);
    write_points(w);
  }
  const std::string script = std::string(FT_SOURCE_DIR) + "/tools/read_tensorboard.py";
  const fs::path errors = dir.path / "stderr.txt";
  const auto [status, out] =
      run(quoted(python) + " " + quoted(script) + " " + quoted(dir.path.string()) + " 2>" + quoted(errors.string()));
  INFO("read_tensorboard.py stdout: ", out, "\nstderr: ", read_all(errors));
  REQUIRE(status == 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  REQUIRE(j.is_object());
  CHECK(j.size() == kExpected.size());
  for (const auto& [tag, points] : kExpected) {
    INFO("tag ", tag);
    REQUIRE(j.contains(tag));
    const auto& got = j.at(tag);
    REQUIRE(got.size() == points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      CHECK(got[i][0].get<std::int64_t>() == points[i].first);
      CHECK(static_cast<float>(got[i][1].get<double>()) == points[i].second);
    }
  }
}

TEST_CASE("read_tensorboard.py refuses a directory without an event file") {
  const char* python = std::getenv("FT_PYTHON");
  if (!python || !*python || run(quoted(python) + " -c 'import tensorboard' >/dev/null 2>&1").first != 0) {
    return ft::test::skip("FT_PYTHON is unset or has no `tensorboard` package");
  }
  TempDir dir("empty");
  fs::create_directories(dir.path);
  const std::string script = std::string(FT_SOURCE_DIR) + "/tools/read_tensorboard.py";
  CHECK(run(quoted(python) + " " + quoted(script) + " " + quoted(dir.path.string()) + " 2>/dev/null").first == 1);
}

}  // namespace test_tensorboard
