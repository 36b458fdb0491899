#pragma once
// Adaptive threads: the controller that runs every region on one thread while the machine is
// contended, and its report. It steers the thread pool of core/parallel.h, which it does not own:
// parallel_ranges hands it every region's timings (detail::note_region) and runtime_threads asks it
// whether a hold is on (detail::contended). HG_ADAPTIVE_THREADS=0 turns it off.
//
// Busy machines. OpenMP threads wait for each other at the end of every parallel region, spinning
// first (libgomp's default). When another process holds a core, the thread that still has work
// waits for its time slice while its partner spins, and a region of microseconds takes milliseconds:
// the Fashion-MNIST MLP ran 10-15x slower on 2 threads than on 1 next to one or two busy loops
// (docs/ARCHITECTURE.md, "Threads"). halfgrad measures every region it runs: when the calling thread
// waited for the others longer than stall_ms and longer than the longest share of the work (its own
// time, scaled when another thread's range holds one item more than its own), that is a
// stall; `stalls` stalls within window_ms make the process run on one thread for hold_ms, then try
// all threads again: one stall then starts the next hold, twice as long (up to max_hold_ms), and a
// quiet spell of 4 * hold_ms resets both. A stall that would start a hold counts only when the
// machine really is oversubscribed at that moment: more runnable threads than online CPUs
// (procs_running in /proc/stat; where it cannot be read, the timings decide alone). On a quiet
// 16-core VM, waking idle vCPUs made regions wait over a millisecond without any other process, and
// the timings alone held the process on one thread for most of a run (3-5x slower than 16 threads).
#include <cstdint>

namespace hg {

struct AdaptiveThreadsOptions {
  bool enabled = true;  // HG_ADAPTIVE_THREADS=0 (or off) in the environment turns it off
  double stall_ms = 1.0;
  int stalls = 3;
  double window_ms = 200;
  double hold_ms = 500;
  double max_hold_ms = 8000;
  bool check_load = true;  // confirm with /proc/stat before a hold (tests that feed timings turn it off)
};
void set_adaptive_threads(const AdaptiveThreadsOptions& o);

struct ThreadState {
  int requested = 0;        // get_num_threads()
  int running = 0;          // what regions use now: requested, or 1 while contended
  bool contended = false;
  int64_t stalls = 0;       // stalled regions seen so far
  int64_t backoffs = 0;     // times the process fell back to one thread
  int64_t dismissed = 0;    // holds not started: the stalls came while the machine was not oversubscribed
};
ThreadState thread_state();

namespace detail {
// The steady clock in ns, which regions and holds are both measured by.
int64_t now_ns();
// Whether a hold is on now: every region runs on one thread (false while the controller is off).
bool contended();
// One region's timings, as parallel_ranges measures them (exposed so that tests can drive the
// detector without depending on how busy the test machine is).
void note_region(int64_t wait_ns, int64_t own_ns);
// 1 when this machine now has more runnable threads than online CPUs (procs_running in /proc/stat
// against sysconf's online CPUs), 0 when not, -1 when /proc/stat cannot be read.
int machine_oversubscribed();
}  // namespace detail

}  // namespace hg
