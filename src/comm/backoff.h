// Internal to src/comm: how a rank waits for a peer. Spinning gives the lowest latency when
// every rank has a core of its own; when ranks outnumber the cores (tests, small machines),
// a spinning rank only delays the peer it waits for, so it yields the core at once.
#pragma once

#include <sched.h>

namespace tessera {
namespace comm {

// Set once at init: more ranks on this node than cores.
void set_oversubscribed(bool oversubscribed);
bool oversubscribed();

class Backoff {
 public:
  // `oversubscribed_spins`: polls before yielding when ranks outnumber cores.
  explicit Backoff(unsigned oversubscribed_spins = 0)
      : spin_limit_(oversubscribed() ? oversubscribed_spins : 4096u) {}
  // Call once per failed poll; returns the number of polls so far.
  unsigned wait() {
    if (polls_ < spin_limit_) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
    return ++polls_;
  }

 private:
  unsigned spin_limit_;
  unsigned polls_ = 0;
};

}  // namespace comm
}  // namespace tessera
