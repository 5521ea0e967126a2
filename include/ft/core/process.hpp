#pragma once
// What Linux says about this process and its machine: the figures a run
// reports beside its own allocator's (resident memory, CPU time) and the
// memory a plan is checked against.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace ft {

// The most resident memory this process has had, in bytes.
inline std::size_t max_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return std::size_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// The memory this process has resident now, in bytes (VmRSS); 0 when unknown.
inline std::uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * std::uint64_t(::sysconf(_SC_PAGESIZE));
}

// CPU seconds this process has used, user and system, over all its threads.
inline double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// A field of /proc/meminfo ("MemTotal", "MemAvailable") in bytes; 0 when absent.
inline std::uint64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == field + ":") return kib * 1024;
  return 0;
}

}  // namespace ft
