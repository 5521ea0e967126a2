#pragma once
// The signals an operator stops a training job with, and what they ask:
//
//   SIGINT   Ctrl-C                        finish the step in flight, write a
//   SIGTERM  kill, Kubernetes, scancel     checkpoint, exit with code 5, from
//   SIGUSR1  Slurm's --signal warning,     which resume = "auto" continues
//            mpirun forwards it            exactly
//   a second SIGINT                        end at once (exit 130)
//   SIGUSR2                                write a checkpoint after the step
//                                          in flight and go on (ftrun control
//                                          save sends it)
//
// They mean that only while a training loop listens between its steps
// (`Listening`). Before and after, each keeps its default action (the
// process ends), except SIGTERM in a process that MPI joined: mpirun sends
// it to every rank when one died, and the MPI thread then finds the dead
// peer and says so (comm/mpi.hpp). While a loop listens, that thread still
// does so first, so a rank's death is never mistaken for an operator's stop.
//
// The handler only stores the signal; the loop reads it between steps and
// the ranks of a job agree on it there, so a signal that reached one rank
// stops all of them at the same step and no collective is left waiting.
#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace ft::signals {

namespace detail {
inline std::atomic<int> received{0};   // the first stopping signal, 0 before one
inline std::atomic<bool> save_asked{false};
inline std::atomic<int> listeners{0};  // training loops that read `received` between steps
inline std::atomic<bool> mpi_watches{false};
inline std::atomic<bool> announces{false};  // this process says at once that it heard (rank 0)

inline void on_signal(int s) {
  if (s == SIGUSR2) {  // never ends the process: a save asked between runs is simply not made
    save_asked.store(true);
    return;
  }
  if (listeners.load() > 0) {
    if (s == SIGINT && received.load() == SIGINT) ::_exit(128 + SIGINT);  // the second Ctrl-C
    int none = 0;
    if (received.compare_exchange_strong(none, s) && announces.load()) {
      static const char line[] = "\nftrun: stopping after the step in flight, with a checkpoint (Ctrl-C again ends at once)\n";
      [[maybe_unused]] const auto written = ::write(2, line, sizeof line - 1);  // async-signal-safe, unlike stdio
    }
    return;
  }
  if (s == SIGTERM && mpi_watches.load()) {
    received.store(s);
    return;
  }
  struct sigaction plain {};
  plain.sa_handler = SIG_DFL;
  sigemptyset(&plain.sa_mask);
  ::sigaction(s, &plain, nullptr);
  ::raise(s);
}

inline void install() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) ::sigaction(s, &action, nullptr);
    return true;
  }();
  (void)installed;
}
}  // namespace detail

// The signal that asked this process to stop, or 0.
inline int received() { return detail::received.load(); }

// Whether a checkpoint was asked for (SIGUSR2) since the last call.
inline bool take_save_request() { return detail::save_asked.exchange(false); }

inline const char* name(int s) {
  return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s == SIGUSR1 ? "SIGUSR1" : "a signal";
}

// For a process in an MPI job: SIGTERM is stored for the MPI thread to judge.
inline void watch_for_mpi() {
  detail::mpi_watches.store(true);
  detail::install();
}

// Whether a training loop is reading the signals now.
inline bool listened_to() { return detail::listeners.load() > 0; }

// While one lives, the stopping signals ask the loop to stop between steps.
class Listening {
public:
  // `announce`: say on stderr as a signal arrives that the run will stop (one rank of a job says it).
  explicit Listening(bool announce) {
    detail::install();
    detail::announces.store(announce);
    // A library's program may train again after a stop; an MPI process's stored SIGTERM is its MPI thread's.
    if (detail::listeners.load() == 0 && !detail::mpi_watches.load()) detail::received.store(0);
    detail::save_asked.store(false);
    ++detail::listeners;
  }
  ~Listening() { --detail::listeners; }
  Listening(const Listening&) = delete;
  Listening& operator=(const Listening&) = delete;
};

}  // namespace ft::signals
