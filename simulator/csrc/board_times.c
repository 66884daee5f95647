/* The board latency model's re-timing loop (simulator/latency.py, BoardProgram._times): the simulator's
 * schedule as a dependency graph, timed with given durations. Sequential by nature (each start depends on
 * earlier ends), so it lives in C; the arithmetic is the same IEEE double additions and comparisons as the
 * Python definition it replaces, so the results are bit-identical (tests/test_latency_model.py). */
#include "vta_sim.h"

/* A reference to another instruction: -1 (none) or an index below n. */
static int bad_ref(int64_t j, uint64_t n) { return j < -1 || (j >= 0 && (uint64_t)j >= n); }

int vta_board_times(uint64_t n, const int64_t *order, const int64_t *prev, const int64_t *room, const int64_t *pop_a,
                    const int64_t *pop_b, const int64_t *space_a, const int64_t *space_b, const double *duration,
                    double fetch, double dram_latency, double *start, double *end, double *disp) {
  for (uint64_t i = 0; i < n; i++) {
    if (order[i] < 0 || (uint64_t)order[i] >= n || bad_ref(prev[i], n) || bad_ref(room[i], n) ||
        bad_ref(pop_a[i], n) || bad_ref(pop_b[i], n) || bad_ref(space_a[i], n) || bad_ref(space_b[i], n))
      return VTA_ERR_ARG;
  }
  for (uint64_t i = 0; i < n; i++) start[i] = end[i] = disp[i] = 0.0;
  double last_dispatch = dram_latency;
  uint64_t d = 0;
  for (uint64_t k = 0; k < n; k++) {
    const uint64_t i = (uint64_t)order[k];
    for (; d <= i; d++) { /* d(i) = max(d(i-1), q(i)) + f, in program order */
      const int64_t r = room[d];
      if (r >= 0 && start[r] > last_dispatch) last_dispatch = start[r];
      last_dispatch += fetch;
      disp[d] = last_dispatch;
    }
    double s = disp[i];
    int64_t j = prev[i];
    if (j >= 0 && end[j] > s) s = end[j];
    j = pop_a[i];
    if (j >= 0 && end[j] > s) s = end[j];
    j = pop_b[i];
    if (j >= 0 && end[j] > s) s = end[j];
    j = space_a[i];
    if (j >= 0 && start[j] > s) s = start[j];
    j = space_b[i];
    if (j >= 0 && start[j] > s) s = start[j];
    start[i] = s;
    end[i] = s + duration[i];
  }
  return VTA_OK;
}
