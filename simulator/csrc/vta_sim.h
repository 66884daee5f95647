/* Behavioural simulator of a VTA-compatible accelerator, with a timing model.
 *
 * Plain C99 over integers and pointers. Every parameter of the hardware arrives at run time in
 * vta_params_t (built in Python from hw_config), so one compiled library serves every configuration.
 * No function ends the process: failures return a nonzero code and a message in the caller's buffer.
 * The semantics and the timing model are specified in docs/simulator.md.
 *
 * This header is also fed to cffi's cdef (preprocessor lines stripped), so it holds only plain
 * declarations with literal array sizes.
 */
#ifndef VTA_SIM_H
#define VTA_SIM_H

#include <stddef.h>
#include <stdint.h>

enum vta_status {
  VTA_OK = 0,
  VTA_ERR_INSN = 1,     /* invalid instruction */
  VTA_ERR_MEM = 2,      /* DRAM access outside mapped regions, bad map/read/write */
  VTA_ERR_DEADLOCK = 3, /* no module can make progress */
  VTA_ERR_BUDGET = 4,   /* the program would run past max_cycles */
  VTA_ERR_ARG = 5,      /* bad argument or out of host memory */
  VTA_ERR_WORK = 6      /* the program would do more host work than max_work */
};

/* Field order of each format: the same order as hw_config/layout.py (checked by a test). */
enum vta_mem_field {
  VTA_MEM_OPCODE, VTA_MEM_POP_PREV, VTA_MEM_POP_NEXT, VTA_MEM_PUSH_PREV, VTA_MEM_PUSH_NEXT,
  VTA_MEM_MEMORY_TYPE, VTA_MEM_SRAM_BASE, VTA_MEM_DRAM_BASE, VTA_MEM_Y_SIZE, VTA_MEM_X_SIZE,
  VTA_MEM_X_STRIDE, VTA_MEM_Y_PAD_0, VTA_MEM_Y_PAD_1, VTA_MEM_X_PAD_0, VTA_MEM_X_PAD_1, VTA_MEM_NFIELDS
};
enum vta_loop_field {
  VTA_LOOP_OPCODE, VTA_LOOP_POP_PREV, VTA_LOOP_POP_NEXT, VTA_LOOP_PUSH_PREV, VTA_LOOP_PUSH_NEXT,
  VTA_LOOP_RESET, VTA_LOOP_UOP_BGN, VTA_LOOP_UOP_END, VTA_LOOP_ITER_OUT, VTA_LOOP_ITER_IN,
  VTA_LOOP_DST_OUT, VTA_LOOP_DST_IN, VTA_LOOP_SRC_OUT, VTA_LOOP_SRC_IN, VTA_LOOP_NCOMMON
};
/* GEMM and ALU share the first VTA_LOOP_NCOMMON fields, then differ. */
enum vta_gemm_field { VTA_GEMM_WGT_OUT = 14, VTA_GEMM_WGT_IN = 15, VTA_GEMM_NFIELDS = 16 };
enum vta_alu_field { VTA_ALU_OPCODE = 14, VTA_ALU_USE_IMM = 15, VTA_ALU_IMM = 16, VTA_ALU_NFIELDS = 17 };
enum vta_uop_field { VTA_UOP_DST, VTA_UOP_SRC, VTA_UOP_WGT, VTA_UOP_NFIELDS };

typedef struct vta_field {
  uint32_t offset; /* bit position in the 128-bit instruction (or 32-bit micro-op) */
  uint32_t width;
} vta_field_t;

typedef struct vta_params {
  uint32_t batch, block_in, block_out;
  uint32_t uop_depth, inp_depth, wgt_depth, acc_depth;
  uint32_t bus_bytes, dram_latency, burst_beats, burst_gap;
  uint32_t gemm_ii, alu_ii, compute_latency, insn_queue_depth, token_queue_depth;
  vta_field_t mem[15];
  vta_field_t gemm[16];
  vta_field_t alu[17];
  vta_field_t uop[3];
} vta_params_t;

typedef struct vta_stats {
  uint64_t inp_load_nbytes, wgt_load_nbytes, acc_load_nbytes, uop_load_nbytes, out_store_nbytes;
  uint64_t gemm_counter, alu_counter;
  uint64_t cycles, finish_cycle;
  uint64_t work;          /* host work units done (docs/simulator.md, "Budgets"), charged as with compute=1 */
  uint64_t insns[3];      /* load, compute, store */
  uint64_t busy[3];
  uint64_t stalls[3][9];  /* pop l2g,g2l,s2g,g2s; push l2g,g2l,s2g,g2s; dispatch */
  int64_t error_index;    /* instruction at fault, or -1 */
} vta_stats_t;

typedef struct vta_trace_event {
  uint64_t start, end;
  uint32_t module;
} vta_trace_event_t;

typedef struct vta_sim vta_sim_t;

/* Whether params are within hw_config's ranges and describe a valid field layout (what vta_sim_create and
 * vta_board_program accept): VTA_OK, or VTA_ERR_ARG with the reason in err. */
int vta_params_check(const vta_params_t *params, char *err, size_t errlen);
vta_sim_t *vta_sim_create(const vta_params_t *params, char *err, size_t errlen);
void vta_sim_destroy(vta_sim_t *sim);
void vta_sim_reset(vta_sim_t *sim);

int vta_sim_map(vta_sim_t *sim, uint64_t addr, uint64_t size, char *err, size_t errlen);
int vta_sim_unmap(vta_sim_t *sim, uint64_t addr, char *err, size_t errlen);
int vta_sim_write(vta_sim_t *sim, uint64_t addr, const uint8_t *src, uint64_t n, char *err, size_t errlen);
int vta_sim_read(vta_sim_t *sim, uint64_t addr, uint8_t *dst, uint64_t n, char *err, size_t errlen);

/* What STORE reads (docs/simulator.md, "The output buffer"): 0 the accumulator narrowed at the store (VTA's fsim),
 * 1 an output buffer that GEMM and ALU write as VTA's HLS does, 2 as VTA's Chisel does (hw_config/capabilities.py
 * OUT_BUFFER_MODES). New simulators have 0; setting a mode makes every row's copy its accumulator's. With
 * refuse_stale, a STORE of a row LOADed or reset since its last GEMM/ALU (which the board stores differently from
 * VTA's functional simulator) is an invalid instruction (Python's strict mode). */
int vta_sim_set_out_buffer(vta_sim_t *sim, int mode, int refuse_stale, char *err, size_t errlen);
int vta_sim_out_buffer(const vta_sim_t *sim);

/* mem: 0 uop, 1 wgt, 2 inp, 3 acc (VTA's memory ids), 4 out (read only: what a STORE would write); count
 * elements from index; raw element bytes. */
int vta_sim_sram(vta_sim_t *sim, uint32_t mem, uint32_t index, uint32_t count, uint8_t *buf, int write,
                 char *err, size_t errlen);

/* Runs `count` 16-byte instructions. compute=0 skips data work (timing only); trace may be NULL.
 * Before each instruction executes: it must end by cycle max_cycles (else VTA_ERR_BUDGET), and the run's host
 * work including it must stay within max_work (else VTA_ERR_WORK); the refused instruction touches nothing. */
int vta_sim_run(vta_sim_t *sim, const uint8_t *insns, uint32_t count, int compute, uint64_t max_cycles,
                uint64_t max_work, vta_stats_t *stats, vta_trace_event_t *trace, char *err, size_t errlen);

/* One item of a batch (vta_sim_run_batch): copy_bytes host bytes from copy_src into DRAM at copy_addr (none when 0),
 * then the `count` instructions at insns (none when 0). */
typedef struct vta_batch_item {
  uint64_t copy_addr;
  const uint8_t *copy_src;
  uint64_t copy_bytes;
  const uint8_t *insns;
  uint32_t count;
} vta_batch_item_t;

/* Runs n items in order, each as vta_sim_write then vta_sim_run (trace NULL) would: the same checks, the budgets per
 * run, item i's counters in stats[i] (zeroed, error_index -1, for an item without instructions). A network's
 * accelerator groups go through one call (graph_pack's batches: no Python between them). Stops at the first item
 * that fails, returning its code and message with *failed its index (n when every item ran); the items before it
 * have run and their effects stay, as with separate calls. */
int vta_sim_run_batch(vta_sim_t *sim, const vta_batch_item_t *items, uint32_t n, int compute, uint64_t max_cycles,
                      uint64_t max_work, vta_stats_t *stats, uint32_t *failed, char *err, size_t errlen);

/* GEMM kernel paths (docs/simulator.md, "Kernel paths"): "portable", "avx2", "avx512" (AVX-512BW) and
 * "avx512vnni", chosen at vta_sim_create from the environment variable VTA_SIM_KERNEL (unset or "auto": the best
 * one this CPU supports). vta_sim_kernel_path returns the path a simulator created now would use, or NULL with
 * the reason in err (an unknown name, or a path this CPU or build lacks: vta_sim_create then fails the same way);
 * vta_sim_kernel the path a simulator uses; vta_sim_kernels_supported the paths this CPU and build support,
 * space-separated. */
const char *vta_sim_kernel_path(char *err, size_t errlen);
const char *vta_sim_kernel(const vta_sim_t *sim);
const char *vta_sim_kernels_supported(void);

/* GEMM threads (docs/simulator.md, "Threads"): a non-reset GEMM of at least min_macs multiply-accumulates is
 * split over `threads` threads (1 to 64), each owning disjoint accumulator entries, so results, counters and
 * cycles do not depend on it. New simulators have 1 thread (Python's Simulator sets its own default). */
int vta_sim_set_threads(vta_sim_t *sim, uint32_t threads, uint64_t min_macs, char *err, size_t errlen);
uint32_t vta_sim_threads(const vta_sim_t *sim);

/* Host time profile (bench/network.py): with on != 0 every run of the simulator adds the wall nanoseconds it spends
 * to ns[], by class: 0 LOAD execution (weight layouts apart), 1 STORE, 2 GEMM (weight layouts apart), 3 ALU, 4 weight
 * layouts (the kernels' shadows of weight tiles, at a LOAD or at a GEMM's first read), 5 whole runs (decoding and
 * the timing model included). vta_sim_set_profile zeroes the counters; profiling never changes a result. */
void vta_sim_set_profile(vta_sim_t *sim, int on);
void vta_sim_profile(const vta_sim_t *sim, uint64_t ns[6]);

/* For tests: which GEMM layouts of weight tile `tile` are up to date (bits: 1 the path's own shadow, 2 the
 * unsigned-input kernels' quad layout, 4 and 16 its int16 sums of two and four quads exact on this tile, 8 the
 * SRAM bytes not yet written), or -1 past the weight SRAM. */
int vta_sim_tile_layout(const vta_sim_t *sim, uint32_t tile);

/* The board latency model's schedule re-timing (simulator/latency.py, BoardProgram; board_times.c): for the n
 * instructions in `order` (a topological order), start/end/dispatch times from the durations and the
 * dependency references (-1: none). Returns VTA_ERR_ARG, touching no time, if a reference is out of range. */
int vta_board_times(uint64_t n, const int64_t *order, const int64_t *prev, const int64_t *room, const int64_t *pop_a,
                    const int64_t *pop_b, const int64_t *space_a, const int64_t *space_b, const double *duration,
                    double fetch, double dram_latency, double *start, double *end, double *disp);

/* The board model's view of n 16-byte instructions (simulator/latency.py, BoardProgram; board_times.c): per
 * instruction its duration in the simulator's timing model with each transfer alone on the bus, its features (bus
 * beats and rows of a DMA, loop iterations of a GEMM/ALU: features[3 * i + k]), the module's previous instruction,
 * the instruction whose start frees its queue slot, the pushes its pops wait for and the pops that free room for its
 * pushes (-1: none), and a DMA's byte range [dma_first, dma_end) (is_dma); the micro-op words loaded. elem_bytes:
 * 8 entries by memory type (hw_config's). Returns VTA_ERR_ARG with a message for parameters vta_params_check refuses,
 * a pop never pushed or a push onto a queue never popped (a stream the simulator would not finish). */
int vta_board_program(const vta_params_t *p, const uint8_t *insns, uint64_t n, const int64_t *elem_bytes,
                      double *duration, double *features, int64_t *prev, int64_t *room, int64_t *pop_a, int64_t *pop_b,
                      int64_t *space_a, int64_t *space_b, int64_t *dma_first, int64_t *dma_end, uint8_t *is_dma,
                      uint64_t *uop_words, char *err, size_t errlen);

/* Bytes covered by the union of the byte ranges [first[i], end[i]) with is_dma[i] (the cache term of the board
 * model: what a call flushes and invalidates), as simulator/latency.py's definition computes it: the ranges in
 * order of first (stable), a new stretch wherever one starts past all the ends before it, each stretch from its
 * first start to the furthest end within it, into *bytes. Returns VTA_ERR_ARG for a negative first (not a byte
 * address) or without host memory. */
int vta_dma_footprint(uint64_t n, const int64_t *first, const int64_t *end, const uint8_t *is_dma, int64_t *bytes);

#endif
