// The processes of an MPI job (mpirun, srun), or a single process: posenc_study spreads its runs
// over ranks through these few calls. Built without MPI (CMake found none), every call is that of
// a job of one rank, so the study needs no #ifdef of its own.
#pragma once

#include <string>

namespace posenc::study::parallel {

// Starts MPI when built with it and started by an MPI launcher (mpirun, mpiexec, srun); a process
// started on its own is a job of one rank without it.
void Init(int* argc, char*** argv);
void Finalize();

int Rank();
int Size();
// Ranks of this job on this machine (they share its cores).
int LocalSize();

// Ends every rank of the job: one rank failing must not leave the others waiting on it.
[[noreturn]] void Abort(int code);

// `text` on every rank as it is on rank 0.
void Broadcast(std::string& text);
// True on every rank when `value` is true on all of them.
bool AllTrue(bool value);
// Waits until every rank has called it (polling, as WaitFor does).
void Barrier();

// Tells rank `to` that task `task` is finished (`task` is the message's tag).
void Notify(int to, int task);
// Waits until rank `from` reports task `task` finished; false if the study is asked to stop
// first (StopReason). Polls with short sleeps rather than a blocking receive: Open MPI's blocking
// receive spins a core, which would take it from a rank that is training on the same machine.
bool WaitFor(int from, int task);

// Why this rank should stop early (stop.h; 0: no stop): a signal this process received, or a
// stop another rank sent. The first time this process's own stop is seen here, it is sent to
// every other rank, so that a signal to any rank stops them all.
int StopReason();
// Called once by every rank after its last task, or once it has stopped: waits for all of them
// (handing on a signal that arrives meanwhile), receives every message still addressed to this
// rank so that MPI ends cleanly, and returns the stop reason of any rank (the largest), 0 when
// none stopped.
int EndTogether(int reason);

}  // namespace posenc::study::parallel
