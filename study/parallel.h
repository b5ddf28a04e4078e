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
// Waits until rank `from` reports task `task` finished. Polls with short sleeps rather than a
// blocking receive: Open MPI's blocking receive spins a core, which would take it from a rank
// that is training on the same machine.
void WaitFor(int from, int task);

}  // namespace posenc::study::parallel
