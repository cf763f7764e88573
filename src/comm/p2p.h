// Internal to src/comm: nonblocking point-to-point messages of any size and waits with a
// deadline. Every algorithm moves its bytes through these.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace tessera {
namespace comm {

class Communicator;

// A batch of outstanding requests on one communicator. Messages over 1 GiB are split into
// several MPI messages, so sizes never overflow MPI's int counts.
class Requests {
 public:
  Requests(Communicator& comm, const char* what, double timeout_s);
  ~Requests();  // waits (best effort, never throws) for anything still outstanding
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;

  // Each returns an id for wait(id).
  int isend(const void* buf, size_t bytes, int peer, int tag) {
    return post(true, buf, bytes, peer, tag);
  }
  int irecv(void* buf, size_t bytes, int peer, int tag) {
    return post(false, buf, bytes, peer, tag);
  }

  // Tracks a request from a nonblocking collective (peer -1: the whole communicator).
  int add(MPI_Request request, size_t bytes);

  // Blocks until request `id` completed. Throws TimeoutError naming the peer after timeout.
  void wait(int id);
  // Blocks until every request completed, then forgets them all.
  void wait_all();

 private:
  struct Pending {
    int first;  // index into reqs_
    int count;  // MPI requests of this message
    int peer;
    size_t bytes;
    bool send;
  };
  int post(bool send, const void* buf, size_t bytes, int peer, int tag);
  void wait_range(int first, int count, const Pending& p);

  Communicator& comm_;
  const char* what_;
  double timeout_s_;
  std::vector<MPI_Request> reqs_;
  std::vector<Pending> pending_;
};

}  // namespace comm
}  // namespace tessera
