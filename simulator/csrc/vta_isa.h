/* VTA's instruction-set rules for the C simulator: GENERATED from hw_config/isa_rules.py (and the ranges of
 * hw_config/config.py) by `python -m hw_config.isa_rules --c-header > simulator/csrc/vta_isa.h`; do not
 * edit. tests/test_isa_rules.py checks that this file is current and that vta_sim.c obeys it. */
#ifndef VTA_ISA_H
#define VTA_ISA_H

#define VTA_INSN_BYTES 16
#define VTA_UOP_BYTES 4

/* Numbering shared with VTA (hw_config/layout.py). */
enum { OP_LOAD = 0, OP_STORE = 1, OP_GEMM = 2, OP_FINISH = 3, OP_ALU = 4, NUM_OPCODES = 5 };
enum { MEM_UOP = 0, MEM_WGT = 1, MEM_INP = 2, MEM_ACC = 3, MEM_OUT = 4, MEM_ACC_8BIT = 5, NUM_MEM_TYPES = 6 };
enum { ALU_MIN = 0, ALU_MAX = 1, ALU_ADD = 2, ALU_SHR = 3, ALU_MUL = 4, NUM_ALU_OPCODES = 5 };
#define NUM_MEM_IDS 8 /* values the 3-bit memory_type field holds */
static const char *const OP_NAMES[NUM_OPCODES] = {"LOAD", "STORE", "GEMM", "FINISH", "ALU"};
static const char *const MEM_NAMES[NUM_MEM_TYPES] = {"UOP", "WGT", "INP", "ACC", "OUT", "ACC_8BIT"};
#define VTA_OPCODES_ALLOWED "0 LOAD, 1 STORE, 2 GEMM, 3 FINISH, 4 ALU"
#define VTA_ALU_OPCODES_ALLOWED "0 MIN, 1 MAX, 2 ADD, 3 SHR, 4 MUL"
#define VTA_LOAD_MEM_ALLOWED "0 UOP, 1 WGT, 2 INP, 3 ACC, 5 ACC_8BIT"
#define VTA_STORE_MEM_ALLOWED "4 OUT"
/* bit t set: memory type t is allowed on LOAD / on a STORE that moves data */
#define VTA_LOAD_MEM_MASK 0x2fu
#define VTA_STORE_MEM_MASK 0x10u

/* The modules and the token queues between them (l2g load->compute, g2l compute->load, s2g store->compute,
 * g2s compute->store); CAUSE_DISPATCH follows the pop and push causes of each queue (vta_stats_t.stalls). */
enum { MOD_LOAD = 0, MOD_COMPUTE = 1, MOD_STORE = 2, NUM_MODULES = 3 };
enum { Q_L2G = 0, Q_G2L = 1, Q_S2G = 2, Q_G2S = 3, NUM_QUEUES = 4, CAUSE_DISPATCH = 8 };
enum { DEP_POP_PREV = 0, DEP_POP_NEXT = 1, DEP_PUSH_PREV = 2, DEP_PUSH_NEXT = 3, NUM_DEP_FLAGS = 4 };
#define NO_QUEUE 0xff
static const char *const MODULE_NAMES[NUM_MODULES] = {"load", "compute", "store"};
static const char *const QUEUE_NAMES[NUM_QUEUES] = {"l2g", "g2l", "s2g", "g2s"};
static const char *const DEP_FLAG_NAMES[NUM_DEP_FLAGS] = {"pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep"};
/* the flags a module may set */
static const char *const DEP_FLAGS_ALLOWED[NUM_MODULES] = {"pop_next, push_next", "pop_prev, pop_next, push_prev, push_next", "pop_prev, push_prev"};

/* The module that executes an instruction: MODULE_OF[opcode][memory_type] (hw_config.isa_rules.module_of). */
static const unsigned char MODULE_OF[NUM_OPCODES][NUM_MEM_IDS] = {
    /* LOAD   */ {MOD_COMPUTE, MOD_LOAD, MOD_LOAD, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE},
    /* STORE  */ {MOD_STORE, MOD_STORE, MOD_STORE, MOD_STORE, MOD_STORE, MOD_STORE, MOD_STORE, MOD_STORE},
    /* GEMM   */ {MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE},
    /* FINISH */ {MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE},
    /* ALU    */ {MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE, MOD_COMPUTE}
};
/* The queue each dependency flag (pop_prev, pop_next, push_prev, push_next) pops or pushes in each module;
 * NO_QUEUE: the module has no such queue and the flag is refused (DEP_QUEUES). */
static const unsigned char DEP_QUEUE[NUM_MODULES][NUM_DEP_FLAGS] = {
    /* load    */ {NO_QUEUE, Q_G2L, NO_QUEUE, Q_L2G},
    /* compute */ {Q_L2G, Q_S2G, Q_G2L, Q_G2S},
    /* store   */ {Q_G2S, NO_QUEUE, Q_S2G, NO_QUEUE}
};

/* Widths of the fixed instruction fields, and the widest uop_end (MAX_LOG_DEPTH + 1 bits). */
#define VTA_MEMOP_ID_BITS 3
#define VTA_LOOP_ITER_BITS 14
#define VTA_MEMOP_SIZE_BITS 16
#define VTA_MEMOP_STRIDE_BITS 16
#define VTA_MEMOP_PAD_BITS 4
#define VTA_UOP_END_MAX_BITS 17
#define VTA_SHIFT_MAX 31 /* shift amounts clamp to this */

/* X(member, lowest, highest) of each scalar of vta_params_t that vta_sim_create accepts: hw_config's
 * ranges, which keep every duration below 2^60 so cycle arithmetic cannot wrap. Shapes, depths and the bus
 * width may be any positive value up to hw_config's highest (the sanitizer driver runs odd ones). */
#define VTA_PARAM_LIMITS(X) \
  X(batch, 1u, 16u)                    /* hw_config: 1..16, powers of two */ \
  X(block_in, 1u, 64u)                 /* hw_config: 2..64, powers of two */ \
  X(block_out, 1u, 64u)                /* hw_config: 2..64, powers of two */ \
  X(uop_depth, 1u, 65536u)             /* hw_config: 2..65536, powers of two */ \
  X(inp_depth, 1u, 65536u)             /* hw_config: 2..65536, powers of two */ \
  X(wgt_depth, 1u, 65536u)             /* hw_config: 2..65536, powers of two */ \
  X(acc_depth, 1u, 65536u)             /* hw_config: 2..65536, powers of two */ \
  X(bus_bytes, 1u, 128u)               /* hw_config: 4..128, powers of two */ \
  X(dram_latency, 0u, 100000u)         /* hw_config: 0..100000 */ \
  X(burst_beats, 1u, 4096u)            /* hw_config: 1..4096 */ \
  X(burst_gap, 0u, 10000u)             /* hw_config: 0..10000 */ \
  X(gemm_ii, 1u, 64u)                  /* hw_config: 1..64 */ \
  X(alu_ii, 1u, 64u)                   /* hw_config: 1..64 */ \
  X(compute_latency, 0u, 10000u)       /* hw_config: 0..10000 */ \
  X(insn_queue_depth, 1u, 65536u)      /* hw_config: 1..65536 */ \
  X(token_queue_depth, 1u, 1024u)      /* hw_config: 1..1024 */

#endif
