// The ThreadSanitizer run's control (scripts/sanitize.sh): a race that run must report. One thread
// writes a buffer while Open MPI copies it into a message (a send to this same rank), the kind
// of race that a suppression naming Open MPI's libraries or plugins would hide: Open MPI is not
// instrumented, so TSan sees its side only through the intercepted memcpy. tsan_reports.py must
// count it as tessera's (this file is in the access stacks), or the run cannot see such races.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<char> buffer(1 << 16, 1), received(buffer.size());
  std::atomic<bool> stop{false};
  // Relaxed on purpose: TSan takes no ordering from relaxed atomics, so the counter lets the
  // sends overlap the writer in time without hiding the race behind a happens-before edge.
  std::atomic<int> rounds{0};
  std::thread writer([&] {
    for (int round = 0; !stop.load(std::memory_order_relaxed); ++round) {
      for (char& c : buffer) c = static_cast<char>(round);  // no synchronisation with MPI: a race
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // A loaded machine may start the writer late: send until it has written during the sends (a
  // CI run once finished all its sends before the writer's first round), for at most 30 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rounds.load(std::memory_order_relaxed) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const int first = rounds.load(std::memory_order_relaxed);
  for (int i = 0; i < 20 || (rounds.load(std::memory_order_relaxed) < first + 3 &&
                             std::chrono::steady_clock::now() < deadline);
       ++i) {
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
