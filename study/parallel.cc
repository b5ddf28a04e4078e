#include "parallel.h"

#ifdef POSENC_STUDY_MPI
#include <mpi.h>

#include <chrono>
#include <thread>
#include <vector>
#endif
#include <cstdlib>

#include "stop.h"

namespace posenc::study::parallel {

#ifdef POSENC_STUDY_MPI
namespace {

// Whether MPI was started: only when a launcher started this process. MPI would find itself
// alone otherwise, and a singleton MPI_Init only costs time and forks Open MPI's helper daemon.
bool started = false;

// A stop sent to the other ranks; above every task index, which Notify uses as its tag.
constexpr int kStopTag = 30000;
int stop_from_other_rank = 0;
bool stop_sent = false;
int stop_payload = 0;  // the buffer of the stop messages, alive until they are sent
std::vector<MPI_Request> stop_requests;
// Messages (task notices and stops) this rank sent to and received from each rank: whatever a
// stopped rank never waited for is received by EndTogether, so that none is left at MPI_Finalize.
std::vector<int> sent_to, received_from;

void Pause() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// The variables the launchers give their processes: Open MPI's mpirun, PMIx (mpirun, srun
// --mpi=pmix), PMI and PMI-2 (MPICH's and Intel's mpiexec, srun --mpi=pmi2).
bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

}  // namespace

void Init(int* argc, char*** argv) {
  if (!LaunchedByMpi()) return;
  // libtorch runs its own threads, but only the main thread calls MPI.
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  started = true;
  sent_to.assign(static_cast<size_t>(Size()), 0);
  received_from.assign(static_cast<size_t>(Size()), 0);
}

void Finalize() {
  if (started) MPI_Finalize();
}

int Rank() {
  if (!started) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int Size() {
  if (!started) return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int LocalSize() {
  if (!started) return 1;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int size = 1;
  MPI_Comm_size(local, &size);
  MPI_Comm_free(&local);
  return size;
}

void Abort(int code) {
  if (started) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // alone; MPI_Abort does not return
}

void Broadcast(std::string& text) {
  if (!started) return;
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  text.resize(static_cast<size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
}

bool AllTrue(bool value) {
  if (!started) return value;
  int in = value ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

void Barrier() {
  if (!started) return;
  // Polled, as WaitFor is: a rank done early must not spin a core the others still train on.
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int finished = 0;
  while (true) {
    MPI_Test(&request, &finished, MPI_STATUS_IGNORE);
    if (finished) break;
    Pause();
  }
}

void Notify(int to, int task) {
  int payload = task;
  MPI_Send(&payload, 1, MPI_INT, to, task, MPI_COMM_WORLD);
  ++sent_to[static_cast<size_t>(to)];
}

bool WaitFor(int from, int task) {
  int arrived = 0;
  while (true) {
    MPI_Iprobe(from, task, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
    if (arrived) break;
    if (StopReason() != 0) return false;
    Pause();
  }
  int payload = 0;
  MPI_Recv(&payload, 1, MPI_INT, from, task, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ++received_from[static_cast<size_t>(from)];
  return true;
}

int StopReason() {
  const int own = LocalStopReason();
  if (!started) return own;
  if (own != 0 && !stop_sent) {  // tell every other rank, once
    stop_sent = true;
    stop_payload = own;
    for (int r = 0; r < Size(); ++r) {
      if (r == Rank()) continue;
      stop_requests.emplace_back();
      MPI_Isend(&stop_payload, 1, MPI_INT, r, kStopTag, MPI_COMM_WORLD, &stop_requests.back());
      ++sent_to[static_cast<size_t>(r)];
    }
  }
  if (own != 0) return own;
  if (stop_from_other_rank == 0) {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kStopTag, MPI_COMM_WORLD, &arrived, &status);
    if (arrived) {
      MPI_Recv(&stop_from_other_rank, 1, MPI_INT, status.MPI_SOURCE, kStopTag, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      ++received_from[static_cast<size_t>(status.MPI_SOURCE)];
    }
  }
  return stop_from_other_rank;
}

int EndTogether(int reason) {
  if (!started) return reason;
  // The largest reason of any rank, polled as Barrier is; a signal arriving meanwhile is handed on
  // to the ranks still working, which then stop and report it.
  int in = reason, out = 0;
  MPI_Request request;
  MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &request);
  int finished = 0;
  while (true) {
    MPI_Test(&request, &finished, MPI_STATUS_IGNORE);
    if (finished) break;
    StopReason();
    Pause();
  }
  // Every rank has stopped sending: receive what was sent here and never waited for.
  std::vector<int> incoming(sent_to.size(), 0);
  MPI_Alltoall(sent_to.data(), 1, MPI_INT, incoming.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (size_t from = 0; from < incoming.size(); ++from) {
    for (int m = received_from[from]; m < incoming[from]; ++m) {
      int payload = 0;
      MPI_Recv(&payload, 1, MPI_INT, static_cast<int>(from), MPI_ANY_TAG, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    }
    received_from[from] = incoming[from];
  }
  MPI_Waitall(static_cast<int>(stop_requests.size()), stop_requests.data(), MPI_STATUSES_IGNORE);
  stop_requests.clear();
  return out;
}

#else  // a job of one rank: nothing to send, nobody to wait for

void Init(int*, char***) {}
void Finalize() {}
int Rank() { return 0; }
int Size() { return 1; }
int LocalSize() { return 1; }
void Abort(int code) { std::exit(code); }
void Broadcast(std::string&) {}
bool AllTrue(bool value) { return value; }
void Barrier() {}
void Notify(int, int) {}
bool WaitFor(int, int) { return LocalStopReason() == 0; }
int StopReason() { return LocalStopReason(); }
int EndTogether(int reason) { return reason; }

#endif

}  // namespace posenc::study::parallel
