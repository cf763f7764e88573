// The ThreadSanitizer run's control (scripts/sanitize.sh): a race that run must report. One thread
// writes a buffer while Open MPI copies it into a message (a send to this same rank), the kind
// of race that a suppression naming Open MPI's libraries or plugins would hide: Open MPI is not
// instrumented, so TSan sees its side only through the intercepted memcpy. tsan_reports.py must
// count it as tessera's (this file is in the access stacks), or the run cannot see such races.
#include <mpi.h>

#include <atomic>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<char> buffer(1 << 16, 1), received(buffer.size());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int round = 0; !stop.load(std::memory_order_relaxed); ++round) {
      for (char& c : buffer) c = static_cast<char>(round);  // no synchronisation with MPI: a race
    }
  });
  for (int i = 0; i < 20; ++i) {
    MPI_Request req;
    MPI_Irecv(received.data(), static_cast<int>(received.size()), MPI_CHAR, rank, 7, MPI_COMM_WORLD,
              &req);
    MPI_Send(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, rank, 7, MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
  stop = true;
  writer.join();
  MPI_Finalize();
  return 0;
}
