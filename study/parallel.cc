#include "parallel.h"

#ifdef POSENC_STUDY_MPI
#include <mpi.h>

#include <chrono>
#include <thread>
#endif
#include <cstdlib>

namespace posenc::study::parallel {

#ifdef POSENC_STUDY_MPI
namespace {

// Whether MPI was started: only when a launcher started this process. MPI would find itself
// alone otherwise, and a singleton MPI_Init only costs time and forks Open MPI's helper daemon.
bool started = false;

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
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Notify(int to, int task) {
  int payload = task;
  MPI_Send(&payload, 1, MPI_INT, to, task, MPI_COMM_WORLD);
}

void WaitFor(int from, int task) {
  int arrived = 0;
  while (true) {
    MPI_Iprobe(from, task, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
    if (arrived) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int payload = 0;
  MPI_Recv(&payload, 1, MPI_INT, from, task, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
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
void WaitFor(int, int) {}

#endif

}  // namespace posenc::study::parallel
