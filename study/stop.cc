#include "stop.h"

#include <unistd.h>

#include <csignal>

namespace posenc::study {
namespace {

volatile std::sig_atomic_t stop_reason = 0;

void OnSignal(int signal) {
  if (stop_reason == 0) stop_reason = signal;
  // write() is safe in a signal handler; printf is not.
  static const char message[] =
      "\nposenc_study: stopping at the next safe point, keeping the work done so far "
      "(Ctrl-C again to end at once)\n";
  [[maybe_unused]] const ssize_t written = write(STDOUT_FILENO, message, sizeof message - 1);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction action{};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  // SA_RESETHAND: the next signal has its default effect and ends the process at once.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void RequestStop(int reason) {
  if (stop_reason == 0) stop_reason = reason;
}

int LocalStopReason() { return stop_reason; }

int StopExitCode(int reason) { return reason == kStopAsked ? 3 : 128 + reason; }

const char* StopName(int reason) {
  switch (reason) {
    case SIGINT:
      return "Ctrl-C (SIGINT)";
    case SIGTERM:
      return "SIGTERM";
    case kStopAsked:
      return "--stop-after-steps";
  }
  return "a signal";
}

}  // namespace posenc::study
