/* The simulator's timing model (docs/simulator.md, "Timing model") of one instruction with the DRAM bus to itself:
 * the one definition the simulator (vta_sim.c) and the board model (board_times.c) both time instructions with. */
#ifndef VTA_TIMING_H
#define VTA_TIMING_H

#include <stdint.h>

#include "vta_sim.h"

typedef struct vta_dma_demand {
  uint64_t rows;  /* rows on the bus: a contiguous transfer (one row, or rows stride == x apart) is one */
  uint64_t beats; /* bus beats: each row's bytes rounded up to whole beats */
  uint64_t span;  /* cycles the transfer keeps the bus: its beats and the gap after each burst, plus pad_cells */
} vta_dma_demand_t;

/* x elements a row of elem bytes, y rows, stride elements apart; pad_cells: a LOAD's padding entries, a cycle
 * each (0 for a STORE). With sizes of at most 16 bits and elements of at most 2^16 bytes no product wraps. */
static inline vta_dma_demand_t vta_dma_demand(const vta_params_t *p, uint64_t x, uint64_t y, uint64_t stride,
                                              uint64_t elem, uint64_t pad_cells) {
  const int one_row = y == 1 || stride == x;
  const uint64_t rows = one_row ? 1 : y;
  const uint64_t row_beats = (x * elem * (one_row ? y : 1) + p->bus_bytes - 1) / p->bus_bytes;
  const uint64_t bursts = (row_beats + p->burst_beats - 1) / p->burst_beats;
  return (vta_dma_demand_t){rows, rows * row_beats, rows * (row_beats + bursts * p->burst_gap) + pad_cells};
}

/* A GEMM or ALU of `iterations` micro-op iterations (iter_out x iter_in x micro-ops, 0 when uop_end <= uop_bgn:
 * the loop does not run): the pipeline fill, then one initiation interval each; at least one cycle. */
static inline uint64_t vta_compute_cycles(const vta_params_t *p, int is_gemm, uint64_t iterations) {
  const uint64_t d = p->compute_latency + iterations * (is_gemm ? p->gemm_ii : p->alu_ii);
  return d ? d : 1;
}

#endif
