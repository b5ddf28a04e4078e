// Stopping the study early without losing its work: Ctrl-C (SIGINT) or SIGTERM, or
// --stop-after-steps in the tests, ask for a stop; the study notices at its next safe point (after
// a training step, between the cells of an evaluation, while it waits for another MPI rank),
// writes the interrupted run's checkpoint, says what is kept and how to resume, and exits.
#pragma once

namespace posenc::study {

// Why the study stops early; 0 (not stopping) when none. Signals are their own number, and the
// reasons are positive so that the ranks can agree on one by taking the largest.
inline constexpr int kStopAsked = 100;  // --stop-after-steps

// SIGINT and SIGTERM ask for a stop. A second Ctrl-C ends the process at once (the checkpoints
// already written are whole: each is written to a temporary name and renamed).
void InstallStopHandlers();
// Asks for a stop from the program itself (kStopAsked), or as a signal or another rank would.
void RequestStop(int reason);
// The stop this process was asked for, 0 when none; parallel::StopReason() adds the other ranks'.
int LocalStopReason();

// The exit status for a stop: 130 for SIGINT and 143 for SIGTERM (128 + the signal, as shells
// report them), 3 for --stop-after-steps.
int StopExitCode(int reason);
// "Ctrl-C (SIGINT)", "SIGTERM", "--stop-after-steps".
const char* StopName(int reason);

}  // namespace posenc::study
