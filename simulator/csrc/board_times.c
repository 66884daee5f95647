/* The board latency model's two loops over a stream (simulator/latency.py, BoardProgram):
 * - vta_board_program: each instruction's module, duration, features and dependency references, read from the
 *   stream once (a trial of every tuning run builds one, so it lives here rather than in numpy);
 * - vta_board_times: the simulator's schedule as a dependency graph, timed with given durations. Sequential by
 *   nature (each start depends on earlier ends); the arithmetic is the same IEEE double additions and comparisons
 *   as the Python definition it replaces, so the results are bit-identical (tests/test_latency_model.py). */
#include "vta_sim.h"
#include "vta_isa.h" /* opcodes, memory types, modules, DEP_QUEUE: generated from hw_config */
#include "vta_timing.h" /* a DMA's cycles, as the simulator times it */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int64_t field_of(const uint8_t *insn, vta_field_t f) {
  uint64_t w[2];
  memcpy(w, insn, sizeof w); /* little-endian bytes, as the simulator reads them */
  return (int64_t)((w[f.offset / 64] >> (f.offset % 64)) & ((f.width >= 64 ? 0 : (uint64_t)1 << f.width) - 1));
}

/* hw_config.isa_rules.module_of (MODULE_OF), an opcode past VTA's five going to the compute module as there */
static int module_of(int64_t op, int64_t mt) { return op < NUM_OPCODES ? MODULE_OF[op][mt & 7] : MOD_COMPUTE; }

static void say(char *err, size_t errlen, const char *fmt, uint64_t i) {
  if (err && errlen) snprintf(err, errlen, fmt, (unsigned long long)i);
}

int vta_board_program(const vta_params_t *p, const uint8_t *insns, uint64_t n, const int64_t *elem_bytes,
                      double *duration, double *features, int64_t *prev, int64_t *room, int64_t *pop_a, int64_t *pop_b,
                      int64_t *space_a, int64_t *space_b, int64_t *dma_first, int64_t *dma_end, uint8_t *is_dma,
                      uint64_t *uop_words, char *err, size_t errlen) {
  /* what the simulator accepts (hw_config's ranges and field widths), uop_bgn as narrow as uop_end, elements of at
   * most 2^16 bytes: then no product below overflows */
  if (vta_params_check(p, err, errlen) != VTA_OK) return VTA_ERR_ARG;
  int ok = p->gemm[VTA_LOOP_UOP_BGN].width <= VTA_UOP_END_MAX_BITS && n <= ((uint64_t)1 << 40);
  for (int t = 0; t < 8; t++) ok &= elem_bytes[t] >= 0 && elem_bytes[t] <= 65536;
  if (!ok) {
    say(err, errlen, "board program: a uop_bgn field, element size or stream length (%llu) out of range", n);
    return VTA_ERR_ARG;
  }
  /* per queue, in program order: the instructions popping it (and by which slot) and pushing it; counted first,
   * so that the lists take what the stream needs (at most two pops and two pushes per instruction) */
  uint64_t n_pop[NUM_QUEUES] = {0}, n_push[NUM_QUEUES] = {0}, n_mod[NUM_MODULES] = {0}, total = 0;
  for (uint64_t i = 0; i < n; i++) {
    const uint8_t *in = insns + 16 * i;
    const int module = module_of(field_of(in, p->mem[VTA_MEM_OPCODE]), field_of(in, p->mem[VTA_MEM_MEMORY_TYPE]));
    n_mod[module]++;
    for (int f = 0; f < 4; f++) {
      const unsigned q = DEP_QUEUE[module][f];
      if (q != NO_QUEUE && field_of(in, p->mem[VTA_MEM_POP_PREV + f])) (f < 2 ? n_pop : n_push)[q]++, total++;
    }
  }
  int64_t *lists = malloc(sizeof(int64_t) * (total + n) + 1);
  uint8_t *slots = malloc(total + 1);
  if (!lists || !slots) {
    free(lists);
    free(slots);
    say(err, errlen, "board program: out of memory for %llu instructions", n);
    return VTA_ERR_ARG;
  }
  int64_t *pops[NUM_QUEUES], *pushes[NUM_QUEUES], *of_module[NUM_MODULES];
  uint8_t *pop_slot[NUM_QUEUES], *push_slot[NUM_QUEUES];
  uint64_t at = 0;
  for (int q = 0; q < NUM_QUEUES; q++) {
    pops[q] = lists + at, pop_slot[q] = slots + at, at += n_pop[q];
    pushes[q] = lists + at, push_slot[q] = slots + at, at += n_push[q];
    n_pop[q] = n_push[q] = 0;   /* counted again as they are filled */
  }
  for (int m = 0; m < NUM_MODULES; m++) {   /* per module, its instructions in order (n in all) */
    of_module[m] = lists + at;
    at += n_mod[m];
    n_mod[m] = 0;
  }

  uint64_t words = 0;
  for (uint64_t i = 0; i < n; i++) {
    const uint8_t *in = insns + 16 * i;
    const int64_t op = field_of(in, p->mem[VTA_MEM_OPCODE]), mt = field_of(in, p->mem[VTA_MEM_MEMORY_TYPE]);
    const int module = module_of(op, mt);
    /* durations: the simulator's (docs/simulator.md, "Timing model"), each transfer alone on the bus */
    const int64_t x = field_of(in, p->mem[VTA_MEM_X_SIZE]), y = field_of(in, p->mem[VTA_MEM_Y_SIZE]);
    const int64_t stride = field_of(in, p->mem[VTA_MEM_X_STRIDE]), elem = elem_bytes[mt & 7];
    double *feat = features + 3 * i;
    feat[0] = feat[1] = feat[2] = 0.0;
    duration[i] = 1.0;
    is_dma[i] = (op == OP_LOAD || op == OP_STORE) && x > 0;
    dma_first[i] = dma_end[i] = 0;
    if (is_dma[i]) {
      uint64_t pad_cells = 0;
      if (op == OP_LOAD) {
        const int64_t pad_y = field_of(in, p->mem[VTA_MEM_Y_PAD_0]) + y + field_of(in, p->mem[VTA_MEM_Y_PAD_1]);
        const int64_t pad_x = field_of(in, p->mem[VTA_MEM_X_PAD_0]) + x + field_of(in, p->mem[VTA_MEM_X_PAD_1]);
        pad_cells = (uint64_t)(pad_y * pad_x - x * y);
        if (mt == MEM_UOP) words += (uint64_t)(x * y);
      }
      /* 16-bit sizes, elements of at most 2^16 bytes (checked above): no product wraps */
      const vta_dma_demand_t d =
          vta_dma_demand(p, (uint64_t)x, (uint64_t)y, (uint64_t)stride, (uint64_t)elem, pad_cells);
      duration[i] = (double)(p->dram_latency + d.span);
      feat[0] = (double)d.beats;
      feat[1] = (double)d.rows;
      dma_first[i] = field_of(in, p->mem[VTA_MEM_DRAM_BASE]) * elem;
      dma_end[i] = dma_first[i] + ((y - 1) * stride + x) * elem;
    } else if (op == OP_GEMM || op == OP_ALU) {
      const int64_t outer = field_of(in, p->gemm[VTA_LOOP_ITER_OUT]) * field_of(in, p->gemm[VTA_LOOP_ITER_IN]);
      const int64_t uops = field_of(in, p->gemm[VTA_LOOP_UOP_END]) - field_of(in, p->gemm[VTA_LOOP_UOP_BGN]);
      duration[i] = (double)vta_compute_cycles(p, op == OP_GEMM, uops > 0 ? (uint64_t)(outer * uops) : 0);
      feat[2] = uops > 0 ? (double)outer : 0.0;
    }
    /* the module's previous instruction, and the one `insn_queue_depth` back whose start frees a queue slot */
    const uint64_t k = n_mod[module]++;
    of_module[module][k] = (int64_t)i;
    prev[i] = k ? of_module[module][k - 1] : -1;
    room[i] = k >= p->insn_queue_depth ? of_module[module][k - p->insn_queue_depth] : -1;
    pop_a[i] = pop_b[i] = space_a[i] = space_b[i] = -1;
    for (int f = 0; f < 4; f++) {   /* pop_prev, pop_next, push_prev, push_next */
      const unsigned q = DEP_QUEUE[module][f];
      if (q == NO_QUEUE || !field_of(in, p->mem[VTA_MEM_POP_PREV + f])) continue;
      if (f < 2) {
        pop_slot[q][n_pop[q]] = (uint8_t)f;
        pops[q][n_pop[q]++] = (int64_t)i;
      } else {
        push_slot[q][n_push[q]] = (uint8_t)(f - 2);
        pushes[q][n_push[q]++] = (int64_t)i;
      }
    }
  }
  /* the k-th pop of a queue waits for the end of its k-th push; a push past the token queue's depth waits for
   * the start of the pop that frees its place */
  int rc = VTA_OK;
  for (int q = 0; q < NUM_QUEUES && rc == VTA_OK; q++) {
    if (n_pop[q] > n_push[q]) {
      say(err, errlen, "instruction %llu pops a token that is never pushed: the board model needs a stream the "
          "simulator runs to completion", (uint64_t)pops[q][n_push[q]]);
      rc = VTA_ERR_ARG;
      break;
    }
    for (uint64_t k = 0; k < n_pop[q]; k++) (pop_slot[q][k] ? pop_b : pop_a)[pops[q][k]] = pushes[q][k];
    const uint64_t depth = p->token_queue_depth;
    if (n_push[q] > depth && n_push[q] - depth > n_pop[q]) {
      say(err, errlen, "instruction %llu pushes onto a full token queue that is never popped: the board model needs "
          "a stream the simulator runs to completion", (uint64_t)pushes[q][depth + n_pop[q]]);
      rc = VTA_ERR_ARG;
      break;
    }
    for (uint64_t k = depth; k < n_push[q]; k++)
      (push_slot[q][k] ? space_b : space_a)[pushes[q][k]] = pops[q][k - depth];
  }
  *uop_words = words;
  free(lists);
  free(slots);
  return rc;
}

/* A DMA's byte range, sorted by first. */
typedef struct byte_range {
  int64_t first, end;
} byte_range_t;

int vta_dma_footprint(uint64_t n, const int64_t *first, const int64_t *end, const uint8_t *is_dma, int64_t *bytes) {
  uint64_t m = 0, top = 0;
  *bytes = 0;
  for (uint64_t i = 0; i < n; i++)
    if (is_dma[i]) {
      if (first[i] < 0) return VTA_ERR_ARG;
      m++;
      if ((uint64_t)first[i] > top) top = (uint64_t)first[i];
    }
  if (m == 0) return VTA_OK;
  byte_range_t *a = malloc(2 * m * sizeof *a), *b = a + m;
  if (!a) return VTA_ERR_ARG;
  for (uint64_t i = 0, k = 0; i < n; i++)
    if (is_dma[i]) a[k++] = (byte_range_t){first[i], end[i]};
  /* LSD radix sort by first, 11 bits a pass over the bits in use (stable, as the definition's sort is): a stream's
   * ranges are long runs of replays, where this is a few times faster than a comparison sort */
  enum { BITS = 11, BUCKETS = 1 << BITS };
  for (unsigned shift = 0; shift < 64 && (top >> shift) != 0; shift += BITS) {
    uint64_t at[BUCKETS] = {0};
    for (uint64_t k = 0; k < m; k++) at[((uint64_t)a[k].first >> shift) & (BUCKETS - 1)]++;
    uint64_t sum = 0;
    for (int d = 0; d < BUCKETS; d++) {
      const uint64_t c = at[d];
      at[d] = sum;
      sum += c;
    }
    for (uint64_t k = 0; k < m; k++) b[at[((uint64_t)a[k].first >> shift) & (BUCKETS - 1)]++] = a[k];
    byte_range_t *t = a;
    a = b;
    b = t;
  }
  int64_t total = 0, start = a[0].first, reach = a[0].end;
  for (uint64_t k = 1; k < m; k++) {
    if (a[k].first > reach) {   /* past every end before it: the stretch so far is complete */
      total += reach - start;
      start = a[k].first;
    }
    if (a[k].end > reach) reach = a[k].end;
  }
  total += reach - start;
  free(a < b ? a : b);
  *bytes = total;
  return VTA_OK;
}
