/* Behavioural simulator with a timing model; specification in docs/simulator.md. */
#define _POSIX_C_SOURCE 200112L /* getpid */
#include "vta_sim.h"
#include "vta_isa.h" /* opcodes, memory types, modules, queues, routing tables, limits: generated from hw_config */
#include "vta_timing.h"
#include "vta_amx.h" /* the amx and amx-emulated kernel paths (vta_amx_native.c, vta_amx_emulated.c) */

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* GEMM threads (vta_sim_set_threads); the defaults can be overridden at compile time (e.g. for a TSan build). */
#define VTA_SIM_MAX_THREADS 64
#ifndef VTA_SIM_DEFAULT_THREADS
#define VTA_SIM_DEFAULT_THREADS 1
#endif
#ifndef VTA_SIM_PAR_MIN_MACS
#define VTA_SIM_PAR_MIN_MACS (UINT64_C(1) << 18)
#endif

/* A mapped DRAM region, with its weight-layout cache: the quad layout (quad_layout_16x16) of each 256-byte weight tile
 * a LOAD read from it, so that loading the same unchanged bytes again (a network's weights, every inference) copies
 * the layout instead of building it again. Slot k is the tile at data + 256 k (regions whose base is a multiple of
 * 256; a weight tile's DRAM address always is). Every write into the region (vta_sim_write, a STORE) clears the
 * slots it touches (dram_written), so a slot is valid only while its bytes are those it was built from. */
typedef struct region {
  uint64_t base, size;
  uint8_t *data;
  uint8_t *wq;      /* size / 256 slots of 256 bytes (allocated at the region's first quad LOAD), or NULL */
  uint8_t *wq_bits; /* per slot: the tile's wgt_t_built bits (SHADOW_QUADS, ...) while wq holds its layout, else 0 */
  int lent;         /* SRAM weight tiles may point into wq (vta_sim's wgt_qp): reclaim_quads before wq changes */
} region_t;

static void region_free(region_t *r) {
  free(r->data);
  free(r->wq);
  free(r->wq_bits);
}

/* `rows` x `count` consecutive micro-ops of a GEMM that read one weight tile: within a row they step their
 * accumulator and input indices by dstep / sstep, from row to row by drow / srow (a conv tile's output rows and
 * columns, in the templates' order). The first micro-op's indices are decoded. */
typedef struct uop_run {
  uint32_t count, rows, dst, src, wgt;
  int64_t dstep, sstep, drow, srow;
} uop_run_t;

/* acc[r * drow + i * dstep] += inp[r * srow + i * sstep] x tile for micro-ops i < n of rows r < rows of a run
 * (gemm_row_avx2_16x16; steps in int32 lanes and input bytes), in that order. */
typedef void (*gemm_row_fn)(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                            ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch);

typedef void (*gemm_fn)(int32_t *, const int8_t *, const uint8_t *, uint32_t, uint32_t, uint32_t);

/* A gemm_row_fn over `ntiles` loop iterations at once that add into the same accumulators (gemm_tiles_vnni): for
 * iteration t, the inputs and the tile move by t * inp_iter and t * tile_iter bytes. */
typedef void (*gemm_tiles_fn)(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                              ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch,
                              uint32_t ntiles, ptrdiff_t inp_iter, ptrdiff_t tile_iter);

/* What one GEMM instruction runs (exec_gemm): its micro-ops as runs, and the kernel they go through. */
typedef struct gemm_job {
  const struct insn *in;
  const uop_run_t *runs;
  uint32_t nruns;
  gemm_row_fn row; /* rows of micro-ops sharing a weight tile, or NULL: one `one` call per micro-op */
  gemm_row_fn row_sum2, row_sum4; /* `row` for tiles marked SHADOW_SUM2 / SHADOW_SUM4, or NULL */
  gemm_fn one;     /* one micro-op, where `row` is NULL */
  const uint8_t *shadow; /* the weight shadows the kernel reads, tile t at shadow + (t - first) * stride */
  size_t stride, first;
  gemm_tiles_fn tiles; /* where the inner loop's iterations all add into the same accumulators (dst_in 0): `row`
                        * over all of them in one call (`fused` = iter_in of them), or NULL */
  uint32_t fused;
} gemm_job_t;

/* Bits of wgt_t_built: which of a tile's shadows are up to date. */
enum {
  SHADOW_OWN = 1,
  SHADOW_QUADS = 2,
  SHADOW_SUM2 = 4,  /* with SHADOW_QUADS: two quads' vpmaddubsw sums add exactly in int16 (quad_layout_16x16) */
  RAW_STALE = 8,    /* with SHADOW_QUADS: the weight SRAM bytes are not written yet, the quad shadow holds the tile */
  SHADOW_SUM4 = 16  /* with SHADOW_QUADS: all four quads' sums add exactly in int16 (implies SHADOW_SUM2) */
};

/* The smallest and largest value of a micro-op field over a GEMM kernel's micro-ops. */
typedef struct field_span {
  int64_t min, max;
} field_span_t;

typedef struct gemm_pool gemm_pool_t; /* GEMM threads (pool_create) */
static gemm_pool_t *pool_create(vta_sim_t *s, uint32_t nthreads);
static void pool_destroy(gemm_pool_t *pool);

/* Micro-op ranges whose largest fields check_indices keeps: room for every GEMM and ALU kernel of a program (with 8,
 * a ResNet-18 inference missed on ~2,150 lookups and rescanned ~320k micro-ops; with 64, ~350 and ~100k, the misses
 * left being ranges whose micro-ops were reloaded) */
#define FIELDS_CACHE 64
#define KERNEL_CACHE 8 /* GEMM kernels whose runs a simulator keeps (a conv has one or two, one per virtual thread) */

struct vta_sim {
  vta_params_t p;
  uint32_t inp_elem, wgt_elem, acc_elem, out_elem; /* element bytes */
  uint32_t *uop;
  int8_t *inp, *wgt;
  int32_t *acc;
  /* The output buffer STORE reads (docs/simulator.md, "The output buffer"), by out_mode (0 mirror, 1 hls, 2 chisel:
   * hw_config/capabilities.py OUT_BUFFER_MODES). A row whose out_stale is 0 holds the low bytes of its accumulator
   * lanes, and is not kept in `out` (the common case costs nothing); out_stale 1: `out` holds the row's own bytes. */
  uint8_t *out, *out_stale;
  uint64_t n_stale; /* rows with out_stale 1 */
  uint8_t *reset_seen; /* per accumulator row, scratch of reset_out_fast (all 0 between instructions) */
  int out_mode;
  int refuse_stale; /* a STORE of a row with out_stale 1 is an error (strict mode) */
  uint8_t *wgt_t;      /* per-kernel shadow of each weight tile (build_shadow): what the GEMM kernel reads */
  size_t wgt_t_stride; /* bytes of one tile's shadow */
  uint8_t *wgt_t_built; /* per tile, the shadows built since its last write (SHADOW_OWN, ...: bits below) */
  gemm_row_fn gemm_row_unsigned; /* the unsigned-input kernel (avx2, avx512, SSSE3 portable; 16x16), or NULL */
  gemm_row_fn gemm_row_sum2, gemm_row_sum4; /* the same for tiles marked SHADOW_SUM2 / SHADOW_SUM4 */
  gemm_tiles_fn gemm_tiles;      /* the unsigned kernel over an inner loop's iterations (gemm_tiles_vnni), or NULL */
  uint8_t *wgt_q;                /* its shadow of each weight tile, 256 bytes each (quad_layout_16x16) */
  const uint8_t **wgt_qp;        /* where tile t's quad shadow is: wgt_q + 256 t, or a region's cached layout of the
                                  * DRAM tile it was loaded from (load_weight_quads; own_quads takes it back) */
  int kernel;          /* K_PORTABLE, ... (the GEMM kernel path) */
  int quads_any_sign;  /* every GEMM takes gemm_row_unsigned over the quad shadow, whatever its inputs' signs (amx) */
  void (*tile_enter)(const uint8_t *cfg); /* amx: LDTILECFG of tile_cfg before a thread's share of a GEMM, or NULL */
  void (*tile_leave)(void);               /* amx: TILERELEASE after it */
  uint8_t tile_cfg[64];                   /* amx: the tile configuration of this block shape (vta_amx_config) */
  void (*gemm)(int32_t *, const int8_t *, const uint8_t *, uint32_t, uint32_t, uint32_t);
  uint32_t threads;    /* GEMM threads (vta_sim_set_threads); 1: all on the calling thread */
  uint64_t par_min_macs; /* a GEMM with fewer multiply-accumulates runs on the calling thread */
  gemm_pool_t *pool;     /* threads > 1: the threads that run shares 1.. of split GEMMs */
  gemm_row_fn gemm_row;  /* a kernel for rows of micro-ops sharing a weight tile, or NULL (find_runs) */
  uop_run_t *runs;       /* a GEMM kernel [bgn, end)'s runs sit at runs[bgn .. bgn + nruns) (nruns <= end - bgn) */
  struct {
    uint32_t bgn, end, nruns;
    field_span_t dst, src, wgt;
  } kernels[KERNEL_CACHE]; /* kernels whose runs are in `runs` (end == 0: a free entry; uop_written) */
  uint32_t next_kernel;    /* the entry the next new kernel takes */
  struct {
    uint32_t bgn, end;      /* end == 0: a free entry (uop_written) */
    uint64_t dst, src, wgt; /* the largest index field of micro-ops [bgn, end) */
    uint64_t dst_min;       /* and the smallest dst (out_follow's range test) */
  } fields_max[FIELDS_CACHE]; /* check_indices' O(1) test for micro-op ranges it has seen */
  uint32_t next_fields_max;
  region_t *regions;
  size_t nregions, cap_regions;
  int profile;          /* vta_sim_set_profile: count host time per class in prof_ns */
  uint64_t prof_ns[6];  /* PROF_LOAD, ... (vta_sim.h, vta_sim_profile) */
};

enum { PROF_LOAD, PROF_STORE, PROF_GEMM, PROF_ALU, PROF_LAYOUT, PROF_RUN };

/* Monotonic wall time in nanoseconds (the profile's clock). */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* One decoded instruction plus what the scheduler derives from it. */
typedef struct insn {
  uint8_t opcode, module, mem_type, reset, alu_op, use_imm;
  uint8_t pop_q[2], push_q[2]; /* queues popped/pushed, NO_QUEUE when unused */
  uint32_t sram_base, y_size, x_size, x_stride, y_pad0, y_pad1, x_pad0, x_pad1;
  uint64_t dram_base;
  uint32_t uop_bgn, uop_end, iter_out, iter_in;
  uint32_t dst_out, dst_in, src_out, src_in, wgt_out, wgt_in;
  int32_t imm;
  uint8_t *dram; /* host pointer of the first DRAM byte touched */
} insn_t;

static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* a * b, or UINT64_MAX when the product does not fit (no budget below 2^64 admits such an instruction). */
static uint64_t mul_sat(uint64_t a, uint64_t b) { return a && b > UINT64_MAX / a ? UINT64_MAX : a * b; }

/* ------------------------------------------------------------------ GEMM kernels, chosen at run time
 *
 * Each kernel computes acc[b][o] += sum_c inp[b][c] * wgt[o][c] for one micro-op, over a per-kernel "shadow"
 * of the weight SRAM (rebuilt tile by tile on every weight write). All arithmetic wraps modulo 2^32, so every
 * kernel leaves the same bits as the scalar definition. One build holds them all: the x86 ones are compiled
 * with function target attributes (no -march needed) and chosen in vta_sim_create by what the running CPU
 * supports, or forced with VTA_SIM_KERNEL (docs/simulator.md, "Kernel paths").
 */
enum { K_PORTABLE = 0, K_AVX2 = 1, K_AVX512 = 2, K_AVX512VNNI = 3, K_AMX = 4, K_AMX_EMULATED = 5, NUM_KERNELS = 6 };
/* Paths "auto" may choose (in order of preference): all but amx-emulated, which runs only when named. */
#define NUM_NATIVE_KERNELS K_AMX_EMULATED
static const char *const KERNEL_NAMES[] = {"portable", "avx2", "avx512", "avx512vnni", "amx", "amx-emulated"};

#if !defined(VTA_SIM_PORTABLE) && (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
#define VTA_SSE2_KERNELS 1 /* the portable path on x86-64: SSE2 is part of its baseline, every x86-64 CPU has it */
#include <emmintrin.h>
#endif
#if !defined(VTA_SIM_PORTABLE) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define VTA_X86_KERNELS 1
#include <immintrin.h>
#ifdef VTA_SIM_EMULATE_AVX512
/* Tests only (VTA_SIM_EMULATE_AVX512=1 at build time): the AVX-512 kernels over SIMDe's portable
 * implementations of the intrinsics, so that their arithmetic is checked bit for bit on CPUs without AVX-512
 * (tests/test_kernel_paths.py); the paths then count as supported wherever AVX2 is. */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include "simde/x86/avx512.h"
#define TARGET_AVX512
#define TARGET_AVX512VNNI
#else
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))
#define TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif
#endif

#ifndef VTA_SSE2_KERNELS
/* generic shadow: each tile transposed to [BLOCK_IN][BLOCK_OUT] and widened to uint32 */
static void shadow_u32(uint8_t *dst, const int8_t *w, uint32_t bo, uint32_t bi) {
  uint32_t *wt = (uint32_t *)(void *)dst;
  for (uint32_t o = 0; o < bo; o++)
    for (uint32_t c = 0; c < bi; c++) wt[(size_t)c * bo + o] = (uint32_t)(int32_t)w[(size_t)o * bi + c];
}

/* Lanes are unsigned so that wrap-around is defined; the low 32 bits equal the signed result. */
static void gemm_scalar(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo,
                        uint32_t bi) {
  const uint32_t *wt = (const uint32_t *)(const void *)tile;
  for (uint32_t b = 0; b < batch; b++) {
    for (uint32_t o = 0; o < bo; o++) {
      uint32_t sum = 0;
      for (uint32_t c = 0; c < bi; c++) sum += (uint32_t)(int32_t)inp[(size_t)b * bi + c] * wt[(size_t)c * bo + o];
      acc[(size_t)b * bo + o] = (int32_t)((uint32_t)acc[(size_t)b * bo + o] + sum);
    }
  }
}

#if defined(__GNUC__) || defined(__clang__)
/* Sixteen output lanes at a time with the compiler's portable vector extension (SIMD on any target). */
typedef uint32_t u32x16 __attribute__((vector_size(64)));

static void gemm_vec16(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo,
                       uint32_t bi) {
  const uint32_t *wt = (const uint32_t *)(const void *)tile;
  if (bo % 16) {
    gemm_scalar(acc, inp, tile, batch, bo, bi);
    return;
  }
  for (uint32_t b = 0; b < batch; b++) {
    const int8_t *x = inp + (size_t)b * bi;
    for (uint32_t o = 0; o < bo; o += 16) {
      u32x16 even = {0}, odd = {0}; /* two chains keep the multiplier busy */
      uint32_t c = 0;
      for (; c + 1 < bi; c += 2) {
        u32x16 w0, w1;
        memcpy(&w0, wt + (size_t)c * bo + o, sizeof w0);
        memcpy(&w1, wt + (size_t)(c + 1) * bo + o, sizeof w1);
        even += w0 * (uint32_t)(int32_t)x[c];
        odd += w1 * (uint32_t)(int32_t)x[c + 1];
      }
      if (c < bi) {
        u32x16 w0;
        memcpy(&w0, wt + (size_t)c * bo + o, sizeof w0);
        even += w0 * (uint32_t)(int32_t)x[c];
      }
      u32x16 a;
      memcpy(&a, acc + (size_t)b * bo + o, sizeof a);
      a += even + odd;
      memcpy(acc + (size_t)b * bo + o, &a, sizeof a);
    }
  }
}
#define GENERIC_GEMM gemm_vec16
#else
#define GENERIC_GEMM gemm_scalar
#endif
#endif /* !VTA_SSE2_KERNELS */

#if defined(VTA_SSE2_KERNELS) || defined(VTA_X86_KERNELS)
/* Pair shadow (SSE2, AVX2, AVX-512BW): 32-bit words [ceil(BLOCK_IN/2)][BLOCK_OUT], word (k, o) holding the int16 pair
 * (w[o][2k], w[o][2k+1]) (0 past BLOCK_IN), for vpmaddwd: x0*w0 + x1*w1 is exact in int32. */
static void shadow_pairs(uint8_t *dst, const int8_t *w, uint32_t bo, uint32_t bi) {
  uint32_t *wp = (uint32_t *)(void *)dst;
  for (uint32_t k = 0; 2 * k < bi; k++)
    for (uint32_t o = 0; o < bo; o++) {
      uint16_t lo = (uint16_t)(int16_t)w[(size_t)o * bi + 2 * k];
      uint16_t hi = 2 * k + 1 < bi ? (uint16_t)(int16_t)w[(size_t)o * bi + 2 * k + 1] : 0;
      wp[(size_t)k * bo + o] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

/* The input row as broadcastable int16 pairs (0 past BLOCK_IN). */
static uint32_t x_pairs(uint32_t *xp, const int8_t *x, uint32_t bi) {
  uint32_t n = 0;
  for (uint32_t c = 0; c < bi; c += 2, n++)
    xp[n] = (uint32_t)(uint16_t)(int16_t)x[c] | (uint32_t)(uint16_t)(int16_t)(c + 1 < bi ? x[c + 1] : 0) << 16;
  return n;
}

/* Lanes the vector loops leave over, from the pair shadow. */
static void tail_pairs(int32_t *acc, const uint32_t *xp, const uint32_t *wp, uint32_t np, uint32_t bo,
                       uint32_t o) {
  for (; o < bo; o++) {
    uint32_t sum = 0;
    for (uint32_t k = 0; k < np; k++) {
      uint32_t xw = xp[k], ww = wp[(size_t)k * bo + o];
      sum += (uint32_t)((int32_t)(int16_t)(uint16_t)xw * (int16_t)(uint16_t)ww) +
             (uint32_t)((int32_t)(int16_t)(uint16_t)(xw >> 16) * (int16_t)(uint16_t)(ww >> 16));
    }
    acc[o] = (int32_t)((uint32_t)acc[o] + sum);
  }
}

#endif /* pair kernels */

/* The loops of a row kernel (gemm_row_fn), around `...`: for rows r < rows (acc and inp step by drow and srow) and
 * micro-ops i < n (by dstep and sstep) and batch rows, with `x` the micro-op's 16 input bytes and `a` its 16
 * accumulators for that batch row (16x16 kernels). */
#define FOR_EACH_UOP(...)                                                        \
  for (uint32_t r_ = 0; r_ < rows; r_++, acc += drow, inp += srow)                \
    for (uint32_t i_ = 0; i_ < n; i_++)                                           \
      for (uint32_t b_ = 0; b_ < batch; b_++) {                                   \
        const int8_t *const x = inp + (ptrdiff_t)i_ * sstep + 16 * (ptrdiff_t)b_; \
        int32_t *const a = acc + (ptrdiff_t)i_ * dstep + 16 * (ptrdiff_t)b_;      \
        __VA_ARGS__                                                               \
      }

/* The kernels exec_gemm takes from an unsigned_rows_<isa> (defined with `attr`, its target): rows of micro-ops on a
 * tile, and the same on tiles whose quads' int16 sums add in pairs (SHADOW_SUM2) or all four (SHADOW_SUM4). */
#define UNSIGNED_KERNEL(isa, attr, name, sums)                                                                    \
  attr static void gemm_row_##isa##_##name##_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow,                 \
                                                   const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,           \
                                                   const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch) { \
    unsigned_rows_##isa(acc, dstep, drow, inp, sstep, srow, tile, n, rows, batch, sums);                          \
  }
#define UNSIGNED_KERNELS(isa, attr)        \
  UNSIGNED_KERNEL(isa, attr, unsigned, 1) \
  UNSIGNED_KERNEL(isa, attr, sum2, 2)     \
  UNSIGNED_KERNEL(isa, attr, sum4, 4)

/* Declares q0 .. q3 (vector type vt, broadcast `bcast` of an __m128i's low 32 bits): the four 4-byte quads of the
 * micro-op's input row x, each broadcast to every 32-bit lane (the unsigned operand of vpmaddubsw / vpdpbusd).
 * _mm_loadu_si32 (an unaligned, aliasing-safe load) lets the compiler fold each into one broadcast load from memory
 * (vpbroadcastd ymm/zmm, m32: a load-port operation), where a broadcast from a general register costs a shuffle-port
 * operation more per quad: the AVX-512 VNNI kernel ran at 1.16 instead of 2.35 ns per micro-op on this Zen 4. */
#define BROADCAST_QUADS(vt, bcast, x)                                                                        \
  const vt q0 = bcast(_mm_loadu_si32(x)), q1 = bcast(_mm_loadu_si32(x + 4)), q2 = bcast(_mm_loadu_si32(x + 8)), \
           q3 = bcast(_mm_loadu_si32(x + 12))
#define BROADCAST_SSE(v) _mm_shuffle_epi32(v, 0) /* SSE has no broadcast instruction */

/* The int32 sums of the unsigned-input kernels (prefix `pre`: _mm, _mm256, _mm512): p0 .. p3 are quads 0 .. 3's
 * vpmaddubsw results (int16 sums of two products each), of which `sums` (1, 2 or 4, a constant where inlined) add
 * in int16 before vpmaddwd by `ones` widens them: 16, 12 or 10 multiplies per 16x16 micro-op on AVX2. */
#define WIDEN_QUADS(pre, p0, p1, p2, p3, ones, sums)                                                       \
  ((sums) == 4   ? pre##_madd_epi16(pre##_add_epi16(pre##_add_epi16(p0, p1), pre##_add_epi16(p2, p3)), ones) \
   : (sums) == 2 ? pre##_add_epi32(pre##_madd_epi16(pre##_add_epi16(p0, p1), ones),                        \
                                   pre##_madd_epi16(pre##_add_epi16(p2, p3), ones))                        \
                 : pre##_add_epi32(pre##_add_epi32(pre##_madd_epi16(p0, ones), pre##_madd_epi16(p1, ones)), \
                                   pre##_add_epi32(pre##_madd_epi16(p2, ones), pre##_madd_epi16(p3, ones))))

#ifdef VTA_SSE2_KERNELS
/* The portable path on x86-64: the AVX2 kernels' formulation (int16 pairs, pmaddwd, exact in int32) at half the
 * width, in SSE2 only. */

/* Sign-extend 16 input bytes to int16: lo holds the pairs k = 0..3, hi k = 4..7 (one 32-bit word each). */
static inline void widen_sse2(const int8_t *x, __m128i *lo, __m128i *hi) {
  const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)x);
  *lo = _mm_srai_epi16(_mm_unpacklo_epi8(raw, raw), 8);
  *hi = _mm_srai_epi16(_mm_unpackhi_epi8(raw, raw), 8);
}

/* Pair k (a 32-bit word of `src`, imm = (k % 4) * 0x55) times row k of the pair shadow, into four output quads. */
#define PAIR_STEP_SSE2(src, imm, k, s)                                                        \
  do {                                                                                        \
    const __m128i xk_ = _mm_shuffle_epi32(src, imm);                                          \
    s[0] = _mm_add_epi32(s[0], _mm_madd_epi16(_mm_loadu_si128(w + 4 * (k)), xk_));           \
    s[1] = _mm_add_epi32(s[1], _mm_madd_epi16(_mm_loadu_si128(w + 4 * (k) + 1), xk_));       \
    s[2] = _mm_add_epi32(s[2], _mm_madd_epi16(_mm_loadu_si128(w + 4 * (k) + 2), xk_));       \
    s[3] = _mm_add_epi32(s[3], _mm_madd_epi16(_mm_loadu_si128(w + 4 * (k) + 3), xk_));       \
  } while (0)

/* gemm_row_avx2_16x16 in SSE2: n micro-ops sharing a 16x16 tile, micro-op i at acc + i * dstep, inp + i * sstep.
 * Two sets of sums (even and odd pairs) halve the add chains. */
static void gemm_row_sse2_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                                ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch) {
  const __m128i *w = (const __m128i *)(const void *)tile;
  FOR_EACH_UOP(
    __m128i lo, hi, e[4], o[4];
    widen_sse2(x, &lo, &hi);
    e[0] = e[1] = e[2] = e[3] = o[0] = o[1] = o[2] = o[3] = _mm_setzero_si128();
    PAIR_STEP_SSE2(lo, 0x00, 0, e);
    PAIR_STEP_SSE2(lo, 0x55, 1, o);
    PAIR_STEP_SSE2(lo, 0xaa, 2, e);
    PAIR_STEP_SSE2(lo, 0xff, 3, o);
    PAIR_STEP_SSE2(hi, 0x00, 4, e);
    PAIR_STEP_SSE2(hi, 0x55, 5, o);
    PAIR_STEP_SSE2(hi, 0xaa, 6, e);
    PAIR_STEP_SSE2(hi, 0xff, 7, o);
    __m128i *d = (__m128i *)(void *)a;
    for (int q = 0; q < 4; q++)
      _mm_storeu_si128(d + q, _mm_add_epi32(_mm_loadu_si128(d + q), _mm_add_epi32(e[q], o[q])));
  )
}

/* shadow_pairs for a 16x16 tile: each row widens to 8 pair words, then 4 x 4 word blocks are transposed. */
static void shadow_pairs_16x16_sse2(uint8_t *dst, const int8_t *w) {
  __m128i *out = (__m128i *)(void *)dst;
  for (int ob = 0; ob < 4; ob++) { /* outputs 4 * ob .. 4 * ob + 3 */
    __m128i lo[4], hi[4];
    for (int o = 0; o < 4; o++) widen_sse2(w + 16 * (4 * ob + o), &lo[o], &hi[o]);
    for (int half = 0; half < 2; half++) {
      const __m128i *r = half ? hi : lo;
      const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]), t1 = _mm_unpacklo_epi32(r[2], r[3]);
      const __m128i t2 = _mm_unpackhi_epi32(r[0], r[1]), t3 = _mm_unpackhi_epi32(r[2], r[3]);
      __m128i *row = out + 16 * half + ob; /* row k of the shadow is out[4 * k .. 4 * k + 3] */
      _mm_storeu_si128(row, _mm_unpacklo_epi64(t0, t1));
      _mm_storeu_si128(row + 4, _mm_unpackhi_epi64(t0, t1));
      _mm_storeu_si128(row + 8, _mm_unpacklo_epi64(t2, t3));
      _mm_storeu_si128(row + 12, _mm_unpackhi_epi64(t2, t3));
    }
  }
}

/* Any block shape from the pair shadow: sixteen outputs, then four, then the tail. */
static void gemm_sse2(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo,
                      uint32_t bi) {
  const uint32_t *wp = (const uint32_t *)(const void *)tile;
  uint32_t xp[128];
  for (uint32_t b = 0; b < batch; b++) {
    const uint32_t np = x_pairs(xp, inp + (size_t)b * bi, bi);
    int32_t *a = acc + (size_t)b * bo;
    uint32_t o = 0;
    for (; o + 16 <= bo; o += 16) {
      __m128i s[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
      for (uint32_t k = 0; k < np; k++) {
        const __m128i xv = _mm_set1_epi32((int)xp[k]);
        const __m128i *r = (const __m128i *)(const void *)(wp + (size_t)k * bo + o);
        for (int q = 0; q < 4; q++) s[q] = _mm_add_epi32(s[q], _mm_madd_epi16(_mm_loadu_si128(r + q), xv));
      }
      __m128i *d = (__m128i *)(void *)(a + o);
      for (int q = 0; q < 4; q++) _mm_storeu_si128(d + q, _mm_add_epi32(_mm_loadu_si128(d + q), s[q]));
    }
    for (; o + 4 <= bo; o += 4) {
      __m128i s0 = _mm_setzero_si128();
      for (uint32_t k = 0; k < np; k++) {
        const __m128i wk = _mm_loadu_si128((const __m128i *)(const void *)(wp + (size_t)k * bo + o));
        s0 = _mm_add_epi32(s0, _mm_madd_epi16(wk, _mm_set1_epi32((int)xp[k])));
      }
      __m128i *d = (__m128i *)(void *)(a + o);
      _mm_storeu_si128(d, _mm_add_epi32(_mm_loadu_si128(d), s0));
    }
    tail_pairs(a, xp, wp, np, bo, o);
  }
}
#endif /* VTA_SSE2_KERNELS */

#ifdef VTA_X86_KERNELS
/* x_pairs, sixteen channels per instruction when BLOCK_IN allows (int16 sign extension lays out the pairs). */
__attribute__((target("avx2"))) static inline uint32_t x_pairs_avx2(uint32_t *xp, const int8_t *x, uint32_t bi) {
  if (bi % 16) return x_pairs(xp, x, bi);
  for (uint32_t c = 0; c < bi; c += 16)
    _mm256_storeu_si256((__m256i *)(void *)(xp + c / 2),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x + c))));
  return bi / 2;
}

/* Pair k (a 32-bit word of each 128-bit half of `src`, imm = (k % 4) * 0x55) times row k of the pair shadow. */
#define PAIR_STEP_AVX2(src, imm, k, s0, s1)                                                    \
  do {                                                                                         \
    const __m256i xk_ = _mm256_shuffle_epi32(src, imm);                                        \
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_loadu_si256(w + 2 * (k)), xk_));       \
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_loadu_si256(w + 2 * (k) + 1), xk_));   \
  } while (0)

/* A run of n micro-ops sharing one 16x16 weight tile (a conv tile's positions; n = 1 for a lone micro-op):
 * micro-op i accumulates into acc + i * dstep from inp + i * sstep. The tile stays in L1 across the run; each
 * input row's int16 pairs are broadcast by in-lane shuffles of its two halves (faster than broadcasts from a
 * stored copy, 4.2 vs 4.8 ns per micro-op, and than vpermd). */
__attribute__((target("avx2"))) static void gemm_row_avx2_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow,
    const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows,
    uint32_t batch) {
  const __m256i *w = (const __m256i *)(const void *)tile;
  FOR_EACH_UOP(
    const __m256i x16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)x));
    const __m256i lo = _mm256_permute2x128_si256(x16, x16, 0x00), hi = _mm256_permute2x128_si256(x16, x16, 0x11);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    PAIR_STEP_AVX2(lo, 0x00, 0, s0, s1);
    PAIR_STEP_AVX2(lo, 0x55, 1, s2, s3);
    PAIR_STEP_AVX2(lo, 0xaa, 2, s0, s1);
    PAIR_STEP_AVX2(lo, 0xff, 3, s2, s3);
    PAIR_STEP_AVX2(hi, 0x00, 4, s0, s1);
    PAIR_STEP_AVX2(hi, 0x55, 5, s2, s3);
    PAIR_STEP_AVX2(hi, 0xaa, 6, s0, s1);
    PAIR_STEP_AVX2(hi, 0xff, 7, s2, s3);
    __m256i *d = (__m256i *)(void *)a;
    _mm256_storeu_si256(d, _mm256_add_epi32(_mm256_loadu_si256(d), _mm256_add_epi32(s0, s2)));
    _mm256_storeu_si256(d + 1, _mm256_add_epi32(_mm256_loadu_si256(d + 1), _mm256_add_epi32(s1, s3)));
  )
}

/* The pair shadow of a 16x16 tile: each row's 16 bytes widen to 8 pair words, then the 16 x 8 word matrix is
 * transposed in two 8 x 8 blocks (shadow_pairs' result, without its per-element loop). */
__attribute__((target("avx2"))) static void shadow_pairs_16x16(uint8_t *dst, const int8_t *w) {
  for (int half = 0; half < 2; half++) {
    __m256i r[8], t[8];
    for (int o = 0; o < 8; o++)
      r[o] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + 16 * (8 * half + o))));
    for (int o = 0; o < 8; o += 2) {
      t[o] = _mm256_unpacklo_epi32(r[o], r[o + 1]);
      t[o + 1] = _mm256_unpackhi_epi32(r[o], r[o + 1]);
    }
    for (int o = 0; o < 8; o += 4) {
      r[o] = _mm256_unpacklo_epi64(t[o], t[o + 2]);
      r[o + 1] = _mm256_unpackhi_epi64(t[o], t[o + 2]);
      r[o + 2] = _mm256_unpacklo_epi64(t[o + 1], t[o + 3]);
      r[o + 3] = _mm256_unpackhi_epi64(t[o + 1], t[o + 3]);
    }
    /* r[0..3]: rows 0-3, r[4..7]: rows 4-7; lane halves hold k = 0..3 and k = 4..7 */
    __m256i *out = (__m256i *)(void *)dst;
    for (int k = 0; k < 4; k++) {
      _mm256_storeu_si256(out + 2 * k + half, _mm256_permute2x128_si256(r[k], r[k + 4], 0x20));
      _mm256_storeu_si256(out + 2 * (k + 4) + half, _mm256_permute2x128_si256(r[k], r[k + 4], 0x31));
    }
  }
}

/* The unsigned-input kernel (avx2, 16x16): when no input byte a GEMM can read is negative (exec_gemm checks),
 * vpmaddubsw multiplies the unsigned inputs by the signed weight bytes four channels at a time, exactly: its int16
 * pair sums lie in [127 * -128 * 2, 127 * 127 * 2], inside int16, so it never saturates; vpmaddwd by ones widens
 * them to int32 (WIDEN_QUADS: after adding `sums` quads' results in int16 where the tile allows). Its weights are
 * the quad shadow (words (k, o) = w[o][4k..4k+3]), 8 registers that stay put for a run, and each input quad is one
 * broadcast load: 1.6x the pair kernel's speed (ResNet's activations are ReLU outputs, all non-negative;
 * sim_speed's random signed data keeps the pair kernel). */
__attribute__((target("avx2"), always_inline)) static inline void unsigned_rows_avx2(
    int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,
    const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch, const int sums) {
  const __m256i *t = (const __m256i *)(const void *)tile;
  __m256i wa[4], wb[4]; /* quad row k, outputs 0-7 and 8-15 */
  for (int k = 0; k < 4; k++) {
    wa[k] = _mm256_loadu_si256(t + 2 * k);
    wb[k] = _mm256_loadu_si256(t + 2 * k + 1);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  FOR_EACH_UOP(
    BROADCAST_QUADS(__m256i, _mm256_broadcastd_epi32, x);
    const __m256i s0 = WIDEN_QUADS(_mm256, _mm256_maddubs_epi16(q0, wa[0]), _mm256_maddubs_epi16(q1, wa[1]),
                                   _mm256_maddubs_epi16(q2, wa[2]), _mm256_maddubs_epi16(q3, wa[3]), ones, sums);
    const __m256i s1 = WIDEN_QUADS(_mm256, _mm256_maddubs_epi16(q0, wb[0]), _mm256_maddubs_epi16(q1, wb[1]),
                                   _mm256_maddubs_epi16(q2, wb[2]), _mm256_maddubs_epi16(q3, wb[3]), ones, sums);
    __m256i *d = (__m256i *)(void *)a;
    _mm256_storeu_si256(d, _mm256_add_epi32(_mm256_loadu_si256(d), s0));
    _mm256_storeu_si256(d + 1, _mm256_add_epi32(_mm256_loadu_si256(d + 1), s1));
  )
}

UNSIGNED_KERNELS(avx2, __attribute__((target("avx2"))))

/* The unsigned-input kernels of the portable path, where the CPU has SSSE3 (every x86-64 CPU since about 2011):
 * unsigned_rows_avx2 at half the width, four outputs per register, weights read from the (L1-resident) tile. Its
 * tile rows and accumulators are 16-byte aligned (vta_sim_create checks), so aligned loads let the compiler fold
 * them into pmaddubsw / paddd as memory operands (legacy SSE encodings take only aligned ones): 3.5 instead of
 * 4.2 ns per micro-op on this Zen 4, a quarter fewer instructions. */
__attribute__((target("ssse3"), always_inline)) static inline void unsigned_rows_ssse3(
    int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,
    const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch, const int sums) {
  const __m128i *t = (const __m128i *)(const void *)tile; /* quad row k, outputs 4g .. 4g + 3: t[4k + g] */
  const __m128i ones = _mm_set1_epi16(1);
  FOR_EACH_UOP(
    BROADCAST_QUADS(__m128i, BROADCAST_SSE, x);
    __m128i *d = (__m128i *)(void *)a;
    for (int g = 0; g < 4; g++) {
      const __m128i p0 = _mm_maddubs_epi16(q0, _mm_load_si128(t + g)),
                    p1 = _mm_maddubs_epi16(q1, _mm_load_si128(t + 4 + g)),
                    p2 = _mm_maddubs_epi16(q2, _mm_load_si128(t + 8 + g)),
                    p3 = _mm_maddubs_epi16(q3, _mm_load_si128(t + 12 + g));
      const __m128i sum = WIDEN_QUADS(_mm, p0, p1, p2, p3, ones, sums);
      _mm_store_si128(d + g, _mm_add_epi32(_mm_load_si128(d + g), sum));
    }
  )
}

UNSIGNED_KERNELS(ssse3, __attribute__((target("ssse3"))))

/* For quad_layout_16x16 and its AVX2 form (prefix `pre`: _mm, _mm256): fold quad[0..3] (quads k = 0..3 of some
 * outputs) into the largest lane sums of |w| over two quads (top2) and four (top4); then the marks they allow. */
#define QUAD_ABS_SUMS(pre, quad, top2, top4)                                                                   \
  do {                                                                                                          \
    const __typeof__(top2) ones_ = pre##_set1_epi8(1);                                                          \
    __typeof__(top2) abs_[4]; /* lanes (o, h): |w[o][c]| + |w[o][c + 1]| (pabsb makes -128 the unsigned 128) */ \
    for (int k_ = 0; k_ < 4; k_++) abs_[k_] = pre##_maddubs_epi16(pre##_abs_epi8(quad[k_]), ones_);            \
    const __typeof__(top2) s01_ = pre##_add_epi16(abs_[0], abs_[1]), s23_ = pre##_add_epi16(abs_[2], abs_[3]);  \
    top2 = pre##_max_epi16(top2, pre##_max_epi16(s01_, s23_));                                                  \
    top4 = pre##_max_epi16(top4, pre##_add_epi16(s01_, s23_));                                                  \
  } while (0)
#define QUAD_MARKS(pre, top2, top4)                                               \
  (pre##_movemask_epi8(pre##_cmpgt_epi16(top2, pre##_set1_epi16(258)))   ? 0      \
   : pre##_movemask_epi8(pre##_cmpgt_epi16(top4, pre##_set1_epi16(258))) ? SHADOW_SUM2 \
                                                                         : SHADOW_SUM2 | SHADOW_SUM4)

/* The quad shadow of a 16x16 tile (shadow_quads' words, without the correction): the tile as a 16 x 4 matrix of
 * 32-bit words, transposed in four 4 x 4 blocks. Returns which int16 sums of the unsigned-input kernels'
 * vpmaddubsw results are exact on this tile: lane (o, h) of quad k's result is x[c] w[o][c] + x[c + 1] w[o][c + 1]
 * (c = 4k + 2h), and with inputs in [0, 127] a sum of such lanes is at most 127 x (the sum of their |w|) in
 * magnitude, exact in int16 while that sum of |w| is at most 258 (127 x 258 = 32766). SHADOW_SUM2: over quads
 * 0 + 1 and 2 + 3 (4 weights a lane; always so when every |w| <= 64), SHADOW_SUM4: over all four (8 weights).
 * ResNet-18's tiles: 99.99% SUM2, 94% SUM4, where |w| <= 64 alone gave 80%. */
__attribute__((target("ssse3"))) static uint8_t quad_layout_16x16(uint8_t *dst, const int8_t *w) {
  __m128i *out = (__m128i *)(void *)dst;
  __m128i top2 = _mm_setzero_si128(), top4 = top2;
  for (int o = 0; o < 16; o += 4) {
    const __m128i *rows = (const __m128i *)(const void *)(w + 16 * o);
    const __m128i r0 = _mm_loadu_si128(rows), r1 = _mm_loadu_si128(rows + 1), r2 = _mm_loadu_si128(rows + 2),
                  r3 = _mm_loadu_si128(rows + 3);
    const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpackhi_epi32(r0, r1), t2 = _mm_unpacklo_epi32(r2, r3),
                  t3 = _mm_unpackhi_epi32(r2, r3);
    const __m128i quad[4] = {_mm_unpacklo_epi64(t0, t2), _mm_unpackhi_epi64(t0, t2), _mm_unpacklo_epi64(t1, t3),
                             _mm_unpackhi_epi64(t1, t3)}; /* quad k of outputs o .. o + 3 */
    for (int k = 0; k < 4; k++) _mm_storeu_si128(out + 4 * k + o / 4, quad[k]);
    QUAD_ABS_SUMS(_mm, quad, top2, top4);
  }
  return (uint8_t)QUAD_MARKS(_mm, top2, top4);
}

/* quad_layout_16x16 eight outputs at a time: register k holds quad k of outputs o .. o + 3 and o + 4 .. o + 7 in its
 * two lanes, which is also how the AVX2 and AVX-512 kernels read the layout. */
__attribute__((target("avx2"))) static uint8_t quad_layout_16x16_avx2(uint8_t *dst, const int8_t *w) {
  __m256i *out = (__m256i *)(void *)dst;
  __m256i top2 = _mm256_setzero_si256(), top4 = top2;
  for (int half = 0; half < 2; half++) { /* outputs 8 half .. 8 half + 7 */
    const __m128i *rows = (const __m128i *)(const void *)(w + 128 * half);
    __m256i r[4]; /* rows i and 4 + i */
    for (int i = 0; i < 4; i++)
      r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(rows + i)), _mm_loadu_si128(rows + 4 + i), 1);
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]),
                  t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i quad[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                             _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
    for (int k = 0; k < 4; k++) _mm256_storeu_si256(out + 2 * k + half, quad[k]);
    QUAD_ABS_SUMS(_mm256, quad, top2, top4);
  }
  return (uint8_t)QUAD_MARKS(_mm256, top2, top4);
}

__attribute__((target("avx2"))) static void gemm_avx2(int32_t *acc, const int8_t *inp, const uint8_t *tile,
                                                      uint32_t batch, uint32_t bo, uint32_t bi) {
  const uint32_t *wp = (const uint32_t *)(const void *)tile;
  uint32_t xp[128];
  for (uint32_t b = 0; b < batch; b++) {
    const uint32_t np = x_pairs_avx2(xp, inp + (size_t)b * bi, bi);
    int32_t *a = acc + (size_t)b * bo;
    uint32_t o = 0;
    for (; o + 32 <= bo; o += 32) {
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
      for (uint32_t k = 0; k < np; k++) {
        const __m256i xv = _mm256_set1_epi32((int)xp[k]);
        const uint32_t *r = wp + (size_t)k * bo + o;
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)r), xv));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(r + 8)), xv));
        s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(r + 16)), xv));
        s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(r + 24)), xv));
      }
      __m256i *d = (__m256i *)(void *)(a + o);
      _mm256_storeu_si256(d, _mm256_add_epi32(_mm256_loadu_si256(d), s0));
      _mm256_storeu_si256(d + 1, _mm256_add_epi32(_mm256_loadu_si256(d + 1), s1));
      _mm256_storeu_si256(d + 2, _mm256_add_epi32(_mm256_loadu_si256(d + 2), s2));
      _mm256_storeu_si256(d + 3, _mm256_add_epi32(_mm256_loadu_si256(d + 3), s3));
    }
    for (; o + 16 <= bo; o += 16) {
      __m256i s0 = _mm256_setzero_si256(), s1 = s0;
      for (uint32_t k = 0; k < np; k++) {
        const __m256i xv = _mm256_set1_epi32((int)xp[k]);
        const uint32_t *r = wp + (size_t)k * bo + o;
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)r), xv));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(r + 8)), xv));
      }
      __m256i *d = (__m256i *)(void *)(a + o);
      _mm256_storeu_si256(d, _mm256_add_epi32(_mm256_loadu_si256(d), s0));
      _mm256_storeu_si256(d + 1, _mm256_add_epi32(_mm256_loadu_si256(d + 1), s1));
    }
    for (; o + 8 <= bo; o += 8) {
      __m256i s0 = _mm256_setzero_si256();
      for (uint32_t k = 0; k < np; k++)
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(
                                      _mm256_loadu_si256((const __m256i *)(const void *)(wp + (size_t)k * bo + o)),
                                      _mm256_set1_epi32((int)xp[k])));
      __m256i *d = (__m256i *)(void *)(a + o);
      _mm256_storeu_si256(d, _mm256_add_epi32(_mm256_loadu_si256(d), s0));
    }
    tail_pairs(a, xp, wp, np, bo, o);
  }
}

/* The avx2 16x16 run kernel at twice the width: one row of the pair shadow (16 outputs) is one register, so a
 * micro-op is 8 vpmaddwd instead of 16. */
TARGET_AVX512 static void gemm_row_avx512_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp,
                                                ptrdiff_t sstep, ptrdiff_t srow, const uint8_t *tile, uint32_t n,
                                                uint32_t rows, uint32_t batch) {
  const uint32_t *wp = (const uint32_t *)(const void *)tile;
  __m512i w[8];
  for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512((const void *)(wp + 16 * k));
  FOR_EACH_UOP(
    const __m256i x16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)x));
    const __m512i lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(x16));
    const __m512i hi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(x16, 1));
    __m512i s0 = _mm512_madd_epi16(w[0], _mm512_shuffle_epi32(lo, 0x00));
    __m512i s1 = _mm512_madd_epi16(w[1], _mm512_shuffle_epi32(lo, 0x55));
    s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(w[2], _mm512_shuffle_epi32(lo, 0xaa)));
    s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(w[3], _mm512_shuffle_epi32(lo, 0xff)));
    s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(w[4], _mm512_shuffle_epi32(hi, 0x00)));
    s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(w[5], _mm512_shuffle_epi32(hi, 0x55)));
    s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(w[6], _mm512_shuffle_epi32(hi, 0xaa)));
    s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(w[7], _mm512_shuffle_epi32(hi, 0xff)));
    _mm512_storeu_si512((void *)a, _mm512_add_epi32(_mm512_loadu_si512((const void *)a), _mm512_add_epi32(s0, s1)));
  )
}

/* The unsigned-input kernel (gemm_row_avx2_unsigned_16x16) at twice the width: a quad shadow row is one register,
 * so a micro-op is 4 vpmaddubsw and 4 vpmaddwd instead of the pair kernel's 8 vpmaddwd and 8 shuffles. */
TARGET_AVX512 __attribute__((always_inline)) static inline void unsigned_rows_avx512(
    int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,
    const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch, const int sums) {
  const uint32_t *wq = (const uint32_t *)(const void *)tile;
  const __m512i w0 = _mm512_loadu_si512((const void *)wq), w1 = _mm512_loadu_si512((const void *)(wq + 16));
  const __m512i w2 = _mm512_loadu_si512((const void *)(wq + 32)), w3 = _mm512_loadu_si512((const void *)(wq + 48));
  const __m512i ones = _mm512_set1_epi16(1);
  FOR_EACH_UOP(
    BROADCAST_QUADS(__m512i, _mm512_broadcastd_epi32, x);
    const __m512i p0 = _mm512_maddubs_epi16(q0, w0), p1 = _mm512_maddubs_epi16(q1, w1),
                  p2 = _mm512_maddubs_epi16(q2, w2), p3 = _mm512_maddubs_epi16(q3, w3);
    const __m512i sum = WIDEN_QUADS(_mm512, p0, p1, p2, p3, ones, sums);
    _mm512_storeu_si512((void *)a, _mm512_add_epi32(_mm512_loadu_si512((const void *)a), sum));
  )
}

UNSIGNED_KERNELS(avx512, TARGET_AVX512)

TARGET_AVX512 static void gemm_avx512(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch,
                                      uint32_t bo, uint32_t bi) {
  const uint32_t *wp = (const uint32_t *)(const void *)tile;
  uint32_t xp[128];
  for (uint32_t b = 0; b < batch; b++) {
    const uint32_t np = x_pairs_avx2(xp, inp + (size_t)b * bi, bi);
    int32_t *a = acc + (size_t)b * bo;
    uint32_t o = 0;
    for (; o + 32 <= bo; o += 32) {
      __m512i s0 = _mm512_setzero_si512(), s1 = s0;
      for (uint32_t k = 0; k < np; k++) {
        const __m512i xv = _mm512_set1_epi32((int)xp[k]);
        const uint32_t *r = wp + (size_t)k * bo + o;
        s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(_mm512_loadu_si512((const void *)r), xv));
        s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(_mm512_loadu_si512((const void *)(r + 16)), xv));
      }
      _mm512_storeu_si512((void *)(a + o), _mm512_add_epi32(_mm512_loadu_si512((const void *)(a + o)), s0));
      _mm512_storeu_si512((void *)(a + o + 16),
                          _mm512_add_epi32(_mm512_loadu_si512((const void *)(a + o + 16)), s1));
    }
    for (; o + 16 <= bo; o += 16) {
      __m512i s0 = _mm512_setzero_si512();
      for (uint32_t k = 0; k < np; k++)
        s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(_mm512_loadu_si512((const void *)(wp + (size_t)k * bo + o)),
                                                    _mm512_set1_epi32((int)xp[k])));
      _mm512_storeu_si512((void *)(a + o), _mm512_add_epi32(_mm512_loadu_si512((const void *)(a + o)), s0));
    }
    tail_pairs(a, xp, wp, np, bo, o);
  }
}

/* Quad shadow (AVX-512 VNNI): 32-bit words [ceil(BLOCK_IN/4)][BLOCK_OUT], word (k, o) holding the bytes
 * w[o][4k..4k+3] (0 past BLOCK_IN), then int32 corr[BLOCK_OUT] = 128 * sum_c w[o][c]. vpdpbusd multiplies
 * unsigned by signed bytes, so the input goes in offset by 128: sum_c (x+128)*w - 128*sum_c w = sum_c x*w,
 * exact (every partial sum stays far below 2^31, and the final sums wrap like the other kernels). */
static size_t quad_words(uint32_t bo, uint32_t bi) { return (size_t)((bi + 3) / 4) * bo; }

static void shadow_quads(uint8_t *dst, const int8_t *w, uint32_t bo, uint32_t bi) {
  uint32_t *wq = (uint32_t *)(void *)dst;
  uint32_t *corr = wq + quad_words(bo, bi);
  for (uint32_t o = 0; o < bo; o++) {
    int32_t sum = 0;
    for (uint32_t k = 0; 4 * k < bi; k++) {
      uint32_t word = 0;
      for (uint32_t j = 0; j < 4 && 4 * k + j < bi; j++) {
        int8_t v = w[(size_t)o * bi + 4 * k + j];
        word |= (uint32_t)(uint8_t)v << (8 * j);
        sum += v;
      }
      wq[(size_t)k * bo + o] = word;
    }
    corr[o] = (uint32_t)(sum * 128);
  }
}

/* A 16x16 run with vpdpbusd: the quad shadow's 4 rows and the correction stay in registers, and each input row,
 * offset by 128 (x ^ 0x80 as a byte), is broadcast quad by quad with in-lane shuffles: 4 instructions per
 * micro-op for 256 multiply-accumulates. */
TARGET_AVX512VNNI static void gemm_row_vnni_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp,
                                                  ptrdiff_t sstep, ptrdiff_t srow, const uint8_t *tile, uint32_t n,
                                                  uint32_t rows, uint32_t batch) {
  const uint32_t *wq = (const uint32_t *)(const void *)tile;
  const __m512i w0 = _mm512_loadu_si512((const void *)wq), w1 = _mm512_loadu_si512((const void *)(wq + 16));
  const __m512i w2 = _mm512_loadu_si512((const void *)(wq + 32)), w3 = _mm512_loadu_si512((const void *)(wq + 48));
  const __m512i corr = _mm512_loadu_si512((const void *)(wq + quad_words(16, 16)));
  const __m128i offset = _mm_set1_epi8((char)0x80);
  FOR_EACH_UOP(
    const __m512i xq = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)x), offset));
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi32(xq, 0x00), w0);
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi32(xq, 0x55), w1);
    s0 = _mm512_dpbusd_epi32(s0, _mm512_shuffle_epi32(xq, 0xaa), w2);
    s1 = _mm512_dpbusd_epi32(s1, _mm512_shuffle_epi32(xq, 0xff), w3);
    _mm512_storeu_si512((void *)a, _mm512_add_epi32(_mm512_loadu_si512((const void *)a),
                                                    _mm512_sub_epi32(_mm512_add_epi32(s0, s1), corr)));
  )
}

/* The unsigned-input kernel on AVX-512 VNNI (16x16): with no input byte a GEMM can read negative (exec_gemm
 * checks), vpdpbusd takes the inputs as the unsigned bytes they are, so neither the offset nor the correction of
 * gemm_row_vnni_16x16 is needed. It reads the quad shadow of the other paths' unsigned kernels (wgt_q: the same
 * words (k, o) = w[o][4k..4k+3] as its own shadow), which a weight LOAD builds straight from DRAM
 * (load_weight_quads); each input quad is one broadcast load, 4 vpdpbusd per micro-op. vpdpbusd adds its four
 * products to the int32 lane wrapping, without saturation: exact. */
TARGET_AVX512VNNI static void gemm_row_vnni_unsigned_16x16(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow,
                                                           const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,
                                                           const uint8_t *tile, uint32_t n, uint32_t rows,
                                                           uint32_t batch) {
  const uint32_t *wq = (const uint32_t *)(const void *)tile;
  const __m512i w0 = _mm512_loadu_si512((const void *)wq), w1 = _mm512_loadu_si512((const void *)(wq + 16));
  const __m512i w2 = _mm512_loadu_si512((const void *)(wq + 32)), w3 = _mm512_loadu_si512((const void *)(wq + 48));
  FOR_EACH_UOP(
    BROADCAST_QUADS(__m512i, _mm512_broadcastd_epi32, x);
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)a), q0, w0);
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, w1);
    s0 = _mm512_dpbusd_epi32(s0, q2, w2);
    s1 = _mm512_dpbusd_epi32(s1, q3, w3);
    _mm512_storeu_si512((void *)a, _mm512_add_epi32(s0, s1));
  )
}

/* gemm_row_vnni_unsigned_16x16 over nt (a constant where inlined) tiles at once: each micro-op's accumulators are
 * loaded and stored once for nt tiles (their inputs at x + t * inp_iter), the tiles' 4 nt registers stay put. */
TARGET_AVX512VNNI __attribute__((always_inline)) static inline void vnni_tiles(
    int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep, ptrdiff_t srow,
    const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch, ptrdiff_t inp_iter, ptrdiff_t tile_iter,
    const int nt) {
  __m512i w[4][4];
  for (int t = 0; t < nt; t++)
    for (int k = 0; k < 4; k++) w[t][k] = _mm512_loadu_si512((const void *)(tile + t * tile_iter + 64 * k));
  FOR_EACH_UOP(
    __m512i s0 = _mm512_loadu_si512((const void *)a), s1 = _mm512_setzero_si512();
    for (int t = 0; t < nt; t++) {
      const int8_t *const xt = x + t * inp_iter;
      BROADCAST_QUADS(__m512i, _mm512_broadcastd_epi32, xt);
      s0 = _mm512_dpbusd_epi32(s0, q0, w[t][0]);
      s1 = _mm512_dpbusd_epi32(s1, q1, w[t][1]);
      s0 = _mm512_dpbusd_epi32(s0, q2, w[t][2]);
      s1 = _mm512_dpbusd_epi32(s1, q3, w[t][3]);
    }
    _mm512_storeu_si512((void *)a, _mm512_add_epi32(s0, s1));
  )
}

/* The unsigned VNNI kernel over a GEMM's inner-loop iterations that add into the same accumulators (gemm_tiles_fn;
 * a 3x3 conv's kernel rows): four tiles at a time, so that a run whose accumulators do not fit in L1 (ResNet-18's
 * runs of 49-98 micro-ops over 14 tiles, 86 KB) loads and stores them a quarter as often: 1.13 instead of 1.32 ns
 * per micro-op in a microbenchmark of such runs. Wrapping int32 addition is order-free: the same sums. */
TARGET_AVX512VNNI static void gemm_tiles_vnni(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp,
                                              ptrdiff_t sstep, ptrdiff_t srow, const uint8_t *tile, uint32_t n,
                                              uint32_t rows, uint32_t batch, uint32_t ntiles, ptrdiff_t inp_iter,
                                              ptrdiff_t tile_iter) {
  for (uint32_t t0 = 0; t0 < ntiles; t0 += 4) {
    const int8_t *const x0 = inp + (ptrdiff_t)t0 * inp_iter;
    const uint8_t *const w0 = tile + (ptrdiff_t)t0 * tile_iter;
    switch (ntiles - t0 < 4 ? ntiles - t0 : 4) {
      case 1: vnni_tiles(acc, dstep, drow, x0, sstep, srow, w0, n, rows, batch, inp_iter, tile_iter, 1); break;
      case 2: vnni_tiles(acc, dstep, drow, x0, sstep, srow, w0, n, rows, batch, inp_iter, tile_iter, 2); break;
      case 3: vnni_tiles(acc, dstep, drow, x0, sstep, srow, w0, n, rows, batch, inp_iter, tile_iter, 3); break;
      default: vnni_tiles(acc, dstep, drow, x0, sstep, srow, w0, n, rows, batch, inp_iter, tile_iter, 4); break;
    }
  }
}

/* shadow_quads of a 16x16 tile: quad_layout_16x16_avx2's words, then the correction 128 * sum_c w[o][c] as
 * vpdpbusd of bytes 0x80 (128 unsigned) by each quad row. */
TARGET_AVX512VNNI static void shadow_quads_16x16(uint8_t *dst, const int8_t *w) {
  (void)quad_layout_16x16_avx2(dst, w);
  const uint32_t *wq = (const uint32_t *)(const void *)dst;
  const __m512i half = _mm512_set1_epi8((char)0x80);
  __m512i corr = _mm512_setzero_si512();
  for (int k = 0; k < 4; k++) corr = _mm512_dpbusd_epi32(corr, half, _mm512_loadu_si512((const void *)(wq + 16 * k)));
  _mm512_storeu_si512((void *)(dst + 4 * quad_words(16, 16)), corr);
}

TARGET_AVX512VNNI static void gemm_avx512vnni(
    int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo, uint32_t bi) {
  const uint32_t *wq = (const uint32_t *)(const void *)tile;
  const uint32_t *corr = wq + quad_words(bo, bi);
  const uint32_t nq = (bi + 3) / 4;
  uint32_t xq[64];
  for (uint32_t b = 0; b < batch; b++) {
    const int8_t *x = inp + (size_t)b * bi;
    for (uint32_t k = 0; k < nq; k++) {
      uint32_t word = 0;
      for (uint32_t j = 0; j < 4; j++) {
        uint32_t c = 4 * k + j;
        word |= (uint32_t)(uint8_t)((c < bi ? x[c] : 0) + 128) << (8 * j);
      }
      xq[k] = word;
    }
    int32_t *a = acc + (size_t)b * bo;
    uint32_t o = 0;
    for (; o + 16 <= bo; o += 16) {
      __m512i s0 = _mm512_setzero_si512(), s1 = s0; /* two chains over even and odd quads */
      uint32_t k = 0;
      for (; k + 1 < nq; k += 2) {
        s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32((int)xq[k]),
                                 _mm512_loadu_si512((const void *)(wq + (size_t)k * bo + o)));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_set1_epi32((int)xq[k + 1]),
                                 _mm512_loadu_si512((const void *)(wq + (size_t)(k + 1) * bo + o)));
      }
      if (k < nq)
        s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32((int)xq[k]),
                                 _mm512_loadu_si512((const void *)(wq + (size_t)k * bo + o)));
      __m512i r = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_loadu_si512((const void *)(corr + o)));
      _mm512_storeu_si512((void *)(a + o), _mm512_add_epi32(_mm512_loadu_si512((const void *)(a + o)), r));
    }
    for (; o < bo; o++) {
      uint32_t sum = 0;
      for (uint32_t c = 0; c < bi; c++)
        sum += (uint32_t)((int32_t)x[c] * (int8_t)(uint8_t)(wq[(size_t)(c / 4) * bo + o] >> (8 * (c % 4))));
      a[o] = (int32_t)((uint32_t)a[o] + sum);
    }
  }
}

static int cpu_has(int kernel) {
  __builtin_cpu_init();
  switch (kernel) {
    case K_AVX2: return __builtin_cpu_supports("avx2");
#ifdef VTA_SIM_EMULATE_AVX512
    case K_AVX512:
    case K_AVX512VNNI: return cpu_has(K_AVX2);
#else
    case K_AVX512: return cpu_has(K_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    case K_AVX512VNNI: return cpu_has(K_AVX512) && __builtin_cpu_supports("avx512vnni");
#endif
    /* AMX CPUs have AVX-512 VNNI (Sapphire Rapids on), so support stays monotone; and the OS must grant the tiles */
    case K_AMX: return cpu_has(K_AVX512VNNI) && !vta_amx_refusal();
    case K_AMX_EMULATED: return cpu_has(K_AVX2); /* its weight layouts and ALU are the avx2 path's */
    default: return 1;
  }
}
#else
static int cpu_has(int kernel) { return kernel == K_PORTABLE; }
#endif

#ifdef VTA_X86_KERNELS
/* The 16x16 tile whose quad shadow is `q` (quad_layout_16x16 backwards: the same 4 x 4 word transposes). */
static void tile_of_quads_16x16(int8_t *w, const uint8_t *q) {
  const __m128i *in = (const __m128i *)(const void *)q;
  for (int o = 0; o < 16; o += 4) {
    const __m128i k0 = _mm_loadu_si128(in + o / 4), k1 = _mm_loadu_si128(in + 4 + o / 4),
                  k2 = _mm_loadu_si128(in + 8 + o / 4), k3 = _mm_loadu_si128(in + 12 + o / 4);
    const __m128i t0 = _mm_unpacklo_epi32(k0, k1), t1 = _mm_unpackhi_epi32(k0, k1), t2 = _mm_unpacklo_epi32(k2, k3),
                  t3 = _mm_unpackhi_epi32(k2, k3);
    __m128i *rows = (__m128i *)(void *)(w + 16 * o);
    _mm_storeu_si128(rows, _mm_unpacklo_epi64(t0, t2));
    _mm_storeu_si128(rows + 1, _mm_unpackhi_epi64(t0, t2));
    _mm_storeu_si128(rows + 2, _mm_unpacklo_epi64(t1, t3));
    _mm_storeu_si128(rows + 3, _mm_unpackhi_epi64(t1, t3));
  }
}
#endif

/* Bytes of one weight tile's shadow for a kernel (a multiple of 64). */
static size_t shadow_bytes(int kernel, uint32_t bo, uint32_t bi) {
  size_t n;
  switch (kernel) {
    case K_AVX2:
    case K_AVX512: n = (size_t)((bi + 1) / 2) * bo * 4; break;
    case K_AVX512VNNI:
    case K_AMX:
    case K_AMX_EMULATED: n = ((size_t)((bi + 3) / 4) + 1) * bo * 4; break;
#ifdef VTA_SSE2_KERNELS
    default: n = (size_t)((bi + 1) / 2) * bo * 4; break; /* pairs, like AVX2 */
#else
    default: n = (size_t)bi * bo * 4; break;
#endif
  }
  return (n + 63) / 64 * 64;
}

static void build_shadow(int kernel, uint8_t *dst, const int8_t *w, uint32_t bo, uint32_t bi) {
#ifdef VTA_X86_KERNELS
  if (kernel == K_AVX2 || kernel == K_AVX512) {
    if (bo == 16 && bi == 16)
      shadow_pairs_16x16(dst, w);
    else
      shadow_pairs(dst, w, bo, bi);
    return;
  }
  if (kernel == K_AVX512VNNI) {
    if (bo == 16 && bi == 16)
      shadow_quads_16x16(dst, w);
    else
      shadow_quads(dst, w, bo, bi);
    return;
  }
  if (kernel == K_AMX || kernel == K_AMX_EMULATED) { /* TDPBSSD's B tile; the correction row goes unread */
    shadow_quads(dst, w, bo, bi);
    return;
  }
#endif
  (void)kernel;
#ifdef VTA_SSE2_KERNELS
  if (bo == 16 && bi == 16)
    shadow_pairs_16x16_sse2(dst, w);
  else
    shadow_pairs(dst, w, bo, bi);
#else
  shadow_u32(dst, w, bo, bi);
#endif
}

static gemm_fn kernel_gemm(int kernel) {
#ifdef VTA_X86_KERNELS
  switch (kernel) {
    case K_AVX2: return gemm_avx2;
    case K_AVX512: return gemm_avx512;
    case K_AVX512VNNI: return gemm_avx512vnni;
    case K_AMX: return vta_amx_gemm_native;
    case K_AMX_EMULATED: return vta_amx_gemm_emulated;
    default: break;
  }
#endif
  (void)kernel;
#ifdef VTA_SSE2_KERNELS
  return gemm_sse2;
#else
  return GENERIC_GEMM;
#endif
}

/* The row kernel of a path and shape, or NULL: micro-ops then go one kernel call each. */
static gemm_row_fn kernel_gemm_row(int kernel, uint32_t bo, uint32_t bi) {
  if (bo != 16 || bi != 16) return NULL;
#ifdef VTA_X86_KERNELS
  if (kernel == K_AVX2) return gemm_row_avx2_16x16;
  if (kernel == K_AVX512) return gemm_row_avx512_16x16;
  if (kernel == K_AVX512VNNI) return gemm_row_vnni_16x16;
  if (kernel == K_AMX) return vta_amx_rows_native;
  if (kernel == K_AMX_EMULATED) return vta_amx_rows_emulated;
#endif
#ifdef VTA_SSE2_KERNELS
  if (kernel == K_PORTABLE) return gemm_row_sse2_16x16;
#endif
  (void)kernel;
  return NULL;
}

/* The unsigned-input kernels of a path and shape, for GEMMs whose inputs are all >= 0 (exec_gemm; they read the
 * 16x16 quad shadow; `sum2` and `sum4` for runs on tiles with SHADOW_SUM2 / SHADOW_SUM4), or 0. */
static int kernel_unsigned(int kernel, uint32_t bo, uint32_t bi, gemm_row_fn *row, gemm_row_fn *sum2,
                           gemm_row_fn *sum4) {
  *row = *sum2 = *sum4 = NULL;
#ifdef VTA_X86_KERNELS
  if (bo == 16 && bi == 16 && kernel == K_AVX2) {
    *row = gemm_row_avx2_unsigned_16x16;
    *sum2 = gemm_row_avx2_sum2_16x16;
    *sum4 = gemm_row_avx2_sum4_16x16;
  } else if (bo == 16 && bi == 16 && kernel == K_AVX512) {
    *row = gemm_row_avx512_unsigned_16x16;
    *sum2 = gemm_row_avx512_sum2_16x16;
    *sum4 = gemm_row_avx512_sum4_16x16;
  } else if (bo == 16 && bi == 16 && kernel == K_AVX512VNNI) { /* no int16 sums to save: no sum2 / sum4 kernels */
    *row = gemm_row_vnni_unsigned_16x16;
  } else if (bo == 16 && bi == 16 && (kernel == K_AMX || kernel == K_AMX_EMULATED)) { /* signed x signed: any input */
    *row = kernel == K_AMX ? vta_amx_rows_native : vta_amx_rows_emulated;
  } else if (bo == 16 && bi == 16 && kernel == K_PORTABLE && (__builtin_cpu_init(), __builtin_cpu_supports("ssse3"))) {
    *row = gemm_row_ssse3_unsigned_16x16;
    *sum2 = gemm_row_ssse3_sum2_16x16;
    *sum4 = gemm_row_ssse3_sum4_16x16;
  }
#endif
  (void)kernel;
  (void)bo;
  (void)bi;
  return *row != NULL;
}

void vta_amx_config(uint8_t cfg[64], uint32_t bo, uint32_t bi, uint32_t batch) {
  /* 16x16 blocks: C 16 micro-ops x 16 int32, A 16 micro-ops x 16 bytes, four B tiles of 4 quad rows x 64 bytes;
   * other shapes: C and A one micro-op's batch rows, B the quad rows, sixteen outputs at a time (BATCH <= 16 and
   * BLOCK_IN <= 64 in every config: hw_config's ranges) */
  const int rows16 = bo == 16 && bi == 16;
  const uint32_t m = rows16 ? 16 : batch, nb = 4 * (bo < 16 ? bo : 16), k4 = (bi + 3) / 4;
  const uint32_t shape[VTA_AMX_GROUP + 2][2] = {{m, nb}, {m, 4 * k4}, {k4, nb}, {k4, nb}, {k4, nb}, {k4, nb}};
  memset(cfg, 0, 64);
  cfg[0] = 1; /* palette 1: eight tiles of up to 16 rows x 64 bytes */
  for (int t = 0; t < (rows16 ? VTA_AMX_GROUP + 2 : 3); t++) {
    cfg[16 + 2 * t] = (uint8_t)shape[t][1]; /* colsb, little-endian 16 bits (<= 64) */
    cfg[48 + t] = (uint8_t)shape[t][0];     /* rows */
  }
}

/* The best kernel this CPU supports. Support is monotone (each path's CPU features include the previous one's). */
static int best_kernel(void) {
  int best = K_PORTABLE;
  for (int k = 0; k < NUM_NATIVE_KERNELS; k++)
    if (cpu_has(k)) best = k;
  return best;
}

/* The path "auto" picks: the best the CPU supports. The AVX-512 paths are checked bit for bit on every CI run over
 * SIMDe's emulation of their intrinsics (VTA_SIM_EMULATE_AVX512), natively where the CPU has them; in such an
 * emulating build they are only run when asked for (emulated, they are slow). */
static int default_kernel(void) {
#ifdef VTA_SIM_EMULATE_AVX512
  return best_kernel() > K_AVX2 ? K_AVX2 : best_kernel();
#else
  return best_kernel();
#endif
}

const char *vta_sim_kernels_supported(void) {
  static const char *const SETS[] = {"portable", "portable avx2", "portable avx2 avx512",
                                     "portable avx2 avx512 avx512vnni", "portable avx2 avx512 avx512vnni amx"};
  return SETS[best_kernel()];
}

/* The kernel VTA_SIM_KERNEL asks for (unset, empty or "auto": the best one the CPU supports), or -1 with err. */
static int select_kernel(char *err, size_t errlen) {
  const char *want = getenv("VTA_SIM_KERNEL");
  if (!want || !*want || !strcmp(want, "auto")) return default_kernel();
  for (int k = 0; k < NUM_KERNELS; k++) {
    if (strcmp(want, KERNEL_NAMES[k])) continue;
    if (cpu_has(k)) return k;
#ifdef VTA_X86_KERNELS
    if (k == K_AMX && cpu_has(K_AVX512VNNI))
      fail(err, errlen, VTA_ERR_ARG, "VTA_SIM_KERNEL=amx, but %s (supported here: %s; amx-emulated runs the AMX "
           "kernels' logic anywhere, slowly)", vta_amx_refusal(), vta_sim_kernels_supported());
    else
      fail(err, errlen, VTA_ERR_ARG, "VTA_SIM_KERNEL=%s, but this CPU does not support it (supported here: %s%s)",
           want, vta_sim_kernels_supported(), k == K_AMX_EMULATED ? "; amx-emulated needs AVX2" : "");
#else
    fail(err, errlen, VTA_ERR_ARG, "VTA_SIM_KERNEL=%s, but this build has only the portable kernel (built with "
         "VTA_SIM_PORTABLE=1 or for a non-x86 host)", want);
#endif
    return -1;
  }
  fail(err, errlen, VTA_ERR_ARG, "VTA_SIM_KERNEL=%s is not a kernel path (allowed: auto, portable, avx2, avx512, "
       "avx512vnni, amx, amx-emulated; supported here: %s)", want, vta_sim_kernels_supported());
  return -1;
}

const char *vta_sim_kernel_path(char *err, size_t errlen) {
  int k = select_kernel(err, errlen);
  return k < 0 ? NULL : KERNEL_NAMES[k];
}

const char *vta_sim_kernel(const vta_sim_t *s) { return KERNEL_NAMES[s->kernel]; }

/* ------------------------------------------------------------------ creation and memory */

static int check_fields(const vta_field_t *f, int n, uint32_t total) {
  for (int i = 0; i < n; i++) {
    if (f[i].width == 0 || f[i].width > 32 || (uint64_t)f[i].offset + f[i].width > total) return 0;
    if (total == 128 && f[i].offset / 64 != (f[i].offset + f[i].width - 1) / 64) return 0;
  }
  return 1;
}

/* Zeroed memory for n elements of `size` bytes at a 64-byte boundary (free() releases it). calloc's large blocks
 * (mmap'd) start 16 bytes past a page, so every 64-byte accumulator row straddled two cache lines and the
 * kernels' 32- and 64-byte accesses split across lines. */
static void *calloc_lines(size_t n, size_t size) {
  void *mem = NULL;
  if (size && n > SIZE_MAX / size) return NULL;
  const size_t bytes = n * size;
  if (posix_memalign(&mem, 64, bytes ? bytes : 1)) return NULL;
  memset(mem, 0, bytes);
  return mem;
}

int vta_params_check(const vta_params_t *p, char *err, size_t errlen) {
  if (!p) return fail(err, errlen, VTA_ERR_ARG, "no simulator parameters");
  /* hw_config's ranges (VTA_PARAM_LIMITS): they keep every duration below 2^60, so cycle arithmetic cannot wrap.
   * v - lo > hi - lo in unsigned arithmetic is v < lo || v > hi. */
#define VTA_CHECK_LIMIT(member, lo, hi)                                                                            \
  if (p->member - (lo) > (hi) - (lo))                                                                              \
    return fail(err, errlen, VTA_ERR_ARG, "invalid simulator parameter %s=%u (allowed: %u to %u)", #member,      \
                p->member, (lo), (hi));
  VTA_PARAM_LIMITS(VTA_CHECK_LIMIT)
#undef VTA_CHECK_LIMIT
  /* Loop and size fields are bounded too (VTA's 14-bit loops and 16-bit sizes): a GEMM then has at most
   * 2^14 * 2^14 * 2^17 iterations, and a DMA at most 2^16 rows of 2^16 elements. */
  int narrow = p->mem[VTA_MEM_MEMORY_TYPE].width <= VTA_MEMOP_ID_BITS && /* indexes MODULE_OF */
               p->gemm[VTA_LOOP_ITER_OUT].width <= VTA_LOOP_ITER_BITS &&
               p->gemm[VTA_LOOP_ITER_IN].width <= VTA_LOOP_ITER_BITS &&
               p->alu[VTA_LOOP_ITER_OUT].width <= VTA_LOOP_ITER_BITS &&
               p->alu[VTA_LOOP_ITER_IN].width <= VTA_LOOP_ITER_BITS &&
               p->gemm[VTA_LOOP_UOP_END].width <= VTA_UOP_END_MAX_BITS &&
               p->alu[VTA_LOOP_UOP_END].width <= VTA_UOP_END_MAX_BITS &&
               p->mem[VTA_MEM_X_SIZE].width <= VTA_MEMOP_SIZE_BITS && p->mem[VTA_MEM_Y_SIZE].width <= VTA_MEMOP_SIZE_BITS &&
               p->mem[VTA_MEM_X_STRIDE].width <= VTA_MEMOP_STRIDE_BITS &&
               p->mem[VTA_MEM_Y_PAD_0].width <= VTA_MEMOP_PAD_BITS && p->mem[VTA_MEM_Y_PAD_1].width <= VTA_MEMOP_PAD_BITS &&
               p->mem[VTA_MEM_X_PAD_0].width <= VTA_MEMOP_PAD_BITS && p->mem[VTA_MEM_X_PAD_1].width <= VTA_MEMOP_PAD_BITS;
  if (!narrow || !check_fields(p->mem, VTA_MEM_NFIELDS, 128) || !check_fields(p->gemm, VTA_GEMM_NFIELDS, 128) ||
      !check_fields(p->alu, VTA_ALU_NFIELDS, 128) || !check_fields(p->uop, VTA_UOP_NFIELDS, 32))
    return fail(err, errlen, VTA_ERR_ARG, "invalid instruction field layout");
  return VTA_OK;
}

vta_sim_t *vta_sim_create(const vta_params_t *params, char *err, size_t errlen) {
  const uint16_t probe = 1;
  if (*(const uint8_t *)&probe != 1) {
    fail(err, errlen, VTA_ERR_ARG, "the simulator needs a little-endian host");
    return NULL;
  }
  const vta_params_t *p = params;
  if (vta_params_check(p, err, errlen) != VTA_OK) return NULL;
  int kernel = select_kernel(err, errlen);
  if (kernel < 0) return NULL;
  vta_sim_t *s = calloc(1, sizeof *s);
  if (!s) {
    fail(err, errlen, VTA_ERR_ARG, "out of host memory");
    return NULL;
  }
  s->p = *p;
  s->inp_elem = p->batch * p->block_in;
  s->wgt_elem = p->block_out * p->block_in;
  s->acc_elem = p->batch * p->block_out * 4;
  s->out_elem = p->batch * p->block_out;
  s->uop = calloc(p->uop_depth, sizeof(uint32_t));
  s->inp = calloc_lines(p->inp_depth, s->inp_elem);
  s->wgt = calloc_lines(p->wgt_depth, s->wgt_elem);
  s->acc = calloc_lines(p->acc_depth, s->acc_elem);
  s->out = calloc_lines(p->acc_depth, s->out_elem);
  s->out_stale = calloc(p->acc_depth, 1);
  s->reset_seen = calloc(p->acc_depth, 1);
  s->kernel = kernel;
  s->gemm = kernel_gemm(kernel);
  s->gemm_row = kernel_gemm_row(kernel, p->block_out, p->block_in);
  s->runs = calloc(p->uop_depth, sizeof *s->runs);
  s->threads = 1;
  s->wgt_t_stride = shadow_bytes(kernel, p->block_out, p->block_in);
  s->wgt_t = calloc_lines(p->wgt_depth, s->wgt_t_stride);
  if (kernel_unsigned(kernel, p->block_out, p->block_in, &s->gemm_row_unsigned, &s->gemm_row_sum2,
                      &s->gemm_row_sum4))
    s->wgt_q = calloc_lines(p->wgt_depth, 256); /* apart from wgt_t, so that each kind of shadow stays dense in cache */
  if (s->wgt_q) {
    s->wgt_qp = calloc(p->wgt_depth, sizeof *s->wgt_qp);
    for (size_t t = 0; s->wgt_qp && t < p->wgt_depth; t++) s->wgt_qp[t] = s->wgt_q + t * 256;
  }
  s->wgt_t_built = calloc(p->wgt_depth, 1);
  if (!s->uop || !s->inp || !s->wgt || !s->acc || !s->out || !s->out_stale || !s->reset_seen || !s->wgt_t || !s->wgt_t_built ||
      !s->runs || (s->gemm_row_unsigned && (!s->wgt_q || !s->wgt_qp))) {
    vta_sim_destroy(s);
    fail(err, errlen, VTA_ERR_ARG, "out of host memory for the SRAMs");
    return NULL;
  }
#ifdef VTA_X86_KERNELS
  if (s->gemm_row_unsigned && kernel == K_AVX512VNNI) s->gemm_tiles = gemm_tiles_vnni;
  if (kernel == K_AMX || kernel == K_AMX_EMULATED) {
    const int native = kernel == K_AMX;
    if (s->gemm_row_unsigned) s->gemm_tiles = native ? vta_amx_tiles_native : vta_amx_tiles_emulated;
    s->quads_any_sign = s->gemm_row_unsigned != NULL;
    s->tile_enter = native ? vta_amx_enter_native : vta_amx_enter_emulated;
    s->tile_leave = native ? vta_amx_leave_native : vta_amx_leave_emulated;
    vta_amx_config(s->tile_cfg, p->block_out, p->block_in, p->batch);
  }
#endif
  if (kernel == K_PORTABLE && s->gemm_row_unsigned && ((uintptr_t)s->acc | (uintptr_t)s->wgt_q) % 16)
    s->gemm_row_unsigned = s->gemm_row_sum2 = s->gemm_row_sum4 = NULL; /* its aligned loads need 16-byte rows */
  if (vta_sim_set_threads(s, VTA_SIM_DEFAULT_THREADS, VTA_SIM_PAR_MIN_MACS, err, errlen)) {
    vta_sim_destroy(s);
    return NULL;
  }
  return s;
}

int vta_sim_set_threads(vta_sim_t *s, uint32_t threads, uint64_t min_macs, char *err, size_t errlen) {
  if (threads == 0 || threads > VTA_SIM_MAX_THREADS)
    return fail(err, errlen, VTA_ERR_ARG, "threads=%u: need 1 to %u", threads, (unsigned)VTA_SIM_MAX_THREADS);
  pool_destroy(s->pool); /* the next split GEMM starts threads for the new count (exec_gemm) */
  s->pool = NULL;
  s->threads = threads;
  s->par_min_macs = min_macs;
  return VTA_OK;
}

uint32_t vta_sim_threads(const vta_sim_t *s) { return s->threads; }

void vta_sim_set_profile(vta_sim_t *s, int on) {
  s->profile = on != 0;
  memset(s->prof_ns, 0, sizeof s->prof_ns);
}

void vta_sim_profile(const vta_sim_t *s, uint64_t ns[6]) { memcpy(ns, s->prof_ns, sizeof s->prof_ns); }

int vta_sim_tile_layout(const vta_sim_t *s, uint32_t tile) {
  return tile < s->p.wgt_depth ? s->wgt_t_built[tile] : -1;
}

void vta_sim_destroy(vta_sim_t *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nregions; i++) region_free(&s->regions[i]);
  free(s->regions);
  free(s->uop);
  free(s->inp);
  free(s->wgt);
  free(s->acc);
  free(s->out);
  free(s->out_stale);
  free(s->reset_seen);
  free(s->wgt_t);
  free(s->wgt_t_built);
  free(s->wgt_q);
  free(s->wgt_qp);
  pool_destroy(s->pool);
  free(s->runs);
  free(s);
}

/* Micro-op SRAM entries [first, end) changed (or their runs' slots are about to): the kernels overlapping them
 * have stale runs. */
static void uop_written(vta_sim_t *s, uint64_t first, uint64_t end) {
  for (int e = 0; e < KERNEL_CACHE; e++)
    if (s->kernels[e].end && s->kernels[e].bgn < end && first < s->kernels[e].end) s->kernels[e].end = 0;
  for (int e = 0; e < FIELDS_CACHE; e++)
    if (s->fields_max[e].end && s->fields_max[e].bgn < end && first < s->fields_max[e].end) s->fields_max[e].end = 0;
}

static void update_wgt_t(vta_sim_t *s, size_t first, size_t count);

void vta_sim_reset(vta_sim_t *s) {
  memset(s->uop, 0, (size_t)s->p.uop_depth * sizeof(uint32_t));
  uop_written(s, 0, s->p.uop_depth);
  memset(s->inp, 0, (size_t)s->p.inp_depth * s->inp_elem);
  memset(s->wgt, 0, (size_t)s->p.wgt_depth * s->wgt_elem);
  memset(s->acc, 0, (size_t)s->p.acc_depth * s->acc_elem);
  memset(s->out, 0, (size_t)s->p.acc_depth * s->out_elem);
  memset(s->out_stale, 0, s->p.acc_depth);
  s->n_stale = 0;
  update_wgt_t(s, 0, s->p.wgt_depth);
}

/* Weight tiles [first, first+count) were written: their shadows are stale (need_shadows rebuilds them, the quad
 * shadow in the tile's own slot). */
static void update_wgt_t(vta_sim_t *s, size_t first, size_t count) {
  memset(s->wgt_t_built + first, 0, count);
  if (s->wgt_qp)
    for (size_t t = first; t < first + count; t++) s->wgt_qp[t] = s->wgt_q + t * 256;
}

/* Tile t's quad shadow back in its own slot (a copy of the region's cached layout it pointed to). */
static void own_quads(vta_sim_t *s, size_t t) {
  uint8_t *own = s->wgt_q + t * 256;
  if (s->wgt_qp[t] == own) return;
  memcpy(own, s->wgt_qp[t], 256);
  s->wgt_qp[t] = own;
}

/* The quad shadows of tiles [lo, hi] one after another, 256 bytes apart, at the returned address: where they are
 * if that holds already (tiles loaded together from one region's cache, or all in their own slots), else in
 * their own slots after copying those that are not. */
static const uint8_t *quads_in_a_row(vta_sim_t *s, size_t lo, size_t hi) {
  const uintptr_t first = (uintptr_t)s->wgt_qp[lo];
  size_t t = lo + 1;
  while (t <= hi && (uintptr_t)s->wgt_qp[t] == first + (t - lo) * 256) t++;
  if (t > hi) return s->wgt_qp[lo];
  for (t = lo; t <= hi; t++) own_quads(s, t);
  return s->wgt_q + lo * 256;
}

/* The SRAM tiles whose quad shadow points into [lo, hi) (a range of a region's cached layouts about to change or
 * go) take it back into their own slots. */
static void reclaim_quads(vta_sim_t *s, const uint8_t *lo, const uint8_t *hi) {
  for (size_t t = 0; t < s->p.wgt_depth; t++)
    if ((uintptr_t)s->wgt_qp[t] >= (uintptr_t)lo && (uintptr_t)s->wgt_qp[t] < (uintptr_t)hi) own_quads(s, t);
}

int vta_sim_set_out_buffer(vta_sim_t *s, int mode, int refuse_stale, char *err, size_t errlen) {
  if (mode < 0 || mode > 2)
    return fail(err, errlen, VTA_ERR_ARG, "output buffer mode %d: allowed 0 mirror, 1 hls, 2 chisel", mode);
  s->out_mode = mode;
  s->refuse_stale = refuse_stale != 0;
  memset(s->out_stale, 0, s->p.acc_depth); /* every row's copy is its accumulator's, as after a reset */
  s->n_stale = 0;
  return VTA_OK;
}

int vta_sim_out_buffer(const vta_sim_t *s) { return s->out_mode; }

/* The low byte of each accumulator (what an 8-bit STORE writes); restrict lets the compiler vectorise it. */
static void low_bytes(uint8_t *restrict dst, const int32_t *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)((uint32_t)src[i] & 0xffu);
}

/* Row `r`'s output copy takes the low bytes its accumulator holds now and stops following it. */
static void out_keep(vta_sim_t *s, size_t r) {
  const size_t lanes = s->out_elem;
  low_bytes(s->out + r * lanes, s->acc + r * lanes, lanes);
  if (!s->out_stale[r]) {
    s->out_stale[r] = 1;
    s->n_stale++;
  }
}

/* Row `r`'s output copy stops following its accumulator (LOAD ACC, a reset GEMM): keep the bytes it holds now. */
static void out_detach(vta_sim_t *s, size_t r) {
  if (!s->out_stale[r]) out_keep(s, r);
}



#ifdef VTA_X86_KERNELS
/* Tile t's quad shadow, from its 16x16 weights w; its wgt_t_built bits: SHADOW_QUADS, with SHADOW_SUM2 and
 * SHADOW_SUM4 where they hold. (Only where the unsigned-input kernels exist: SSSE3 at least.) */
static uint8_t quad_layout(vta_sim_t *s, size_t t, const int8_t *w) {
  s->wgt_qp[t] = s->wgt_q + t * 256;
  return (uint8_t)(SHADOW_QUADS | (s->kernel == K_PORTABLE ? quad_layout_16x16 : quad_layout_16x16_avx2)(
                                      s->wgt_q + t * 256, w));
}
#endif

/* Write the weight SRAM bytes of tiles [lo, hi] that a LOAD left in their quad shadow only (RAW_STALE). */
static void raw_weights(vta_sim_t *s, size_t lo, size_t hi) {
  for (size_t t = lo; t <= hi; t++) {
    if (!(s->wgt_t_built[t] & RAW_STALE)) continue;
#ifdef VTA_X86_KERNELS
    tile_of_quads_16x16(s->wgt + t * s->wgt_elem, s->wgt_qp[t]);
#endif
    s->wgt_t_built[t] &= (uint8_t)~RAW_STALE;
  }
}

/* Build the `kind` shadows (SHADOW_OWN: the path's; SHADOW_QUADS: the unsigned-input kernel's) of weight tiles
 * [lo, hi] that are stale. Shadows are built when a GEMM first reads a tile after its write, before any thread
 * starts on it, so a tile gets only the shadows its GEMMs read (ResNet's never need the pair shadow). */
static void need_shadows(vta_sim_t *s, int kind, size_t lo, size_t hi) {
  for (size_t t = lo; t <= hi; t++) {
    if (s->wgt_t_built[t] & kind) continue;
    raw_weights(s, t, t);
    const int8_t *w = s->wgt + t * s->wgt_elem;
#ifdef VTA_X86_KERNELS
    if (kind == SHADOW_QUADS) {
      s->wgt_t_built[t] |= quad_layout(s, t, w);
      continue;
    }
#endif
    build_shadow(s->kernel, s->wgt_t + t * s->wgt_t_stride, w, s->p.block_out, s->p.block_in);
    s->wgt_t_built[t] |= (uint8_t)kind;
  }
}

/* Whether input SRAM entries [lo, hi] hold no negative byte (a GEMM over them may take the unsigned-input kernel). */
static int inputs_unsigned(const vta_sim_t *s, size_t lo, size_t hi) {
  const uint8_t *p = (const uint8_t *)s->inp + lo * s->inp_elem;
  const size_t n = (hi - lo + 1) * s->inp_elem;
  size_t i = 0;
  while (i + 8 <= n) { /* blocks of up to 256 bytes, so that a negative byte ends the scan early */
    uint64_t any = 0;
    for (const size_t end = i + 256 <= n ? i + 256 : n / 8 * 8; i < end; i += 8) {
      uint64_t v;
      memcpy(&v, p + i, 8);
      any |= v;
    }
    if (any & UINT64_C(0x8080808080808080)) return 0;
  }
  for (; i < n; i++)
    if (p[i] & 0x80) return 0;
  return 1;
}

/* Bytes [off, off + n) of region r are about to be written: the cached weight layouts of the slots they touch are
 * stale (SRAM tiles pointing at them keep a copy: they hold what was loaded before the write). */
static void dram_written(vta_sim_t *s, region_t *r, uint64_t off, uint64_t n) {
  const uint64_t slots = r->size / 256;
  if (!r->wq_bits || n == 0 || off / 256 >= slots) return;
  const uint64_t first = off / 256, last = (off + n - 1) / 256 < slots ? (off + n - 1) / 256 : slots - 1;
  memset(r->wq_bits + first, 0, (size_t)(last - first + 1));
  if (r->lent) reclaim_quads(s, r->wq + first * 256, r->wq + (last + 1) * 256);
}

/* Index of the last region whose base <= addr, or -1. */
static long find_region(const vta_sim_t *s, uint64_t addr) {
  long lo = 0, hi = (long)s->nregions - 1, best = -1;
  while (lo <= hi) {
    long mid = (lo + hi) / 2;
    if (s->regions[mid].base <= addr) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

/* Host pointer for [addr, addr+n) if it lies inside one region, else NULL. */
static uint8_t *resolve(const vta_sim_t *s, uint64_t addr, uint64_t n) {
  long i = find_region(s, addr);
  if (i < 0) return NULL;
  const region_t *r = &s->regions[i];
  uint64_t off = addr - r->base;
  if (off > r->size || n > r->size - off) return NULL;
  return r->data + off;
}

int vta_sim_map(vta_sim_t *s, uint64_t addr, uint64_t size, char *err, size_t errlen) {
  if (size == 0 || size > ((uint64_t)1 << 40) || addr > ((uint64_t)1 << 48) - size)
    return fail(err, errlen, VTA_ERR_MEM, "cannot map %llu bytes at 0x%llx", (unsigned long long)size,
                (unsigned long long)addr);
  long i = find_region(s, addr);
  if (i >= 0 && s->regions[i].base + s->regions[i].size > addr)
    return fail(err, errlen, VTA_ERR_MEM, "cannot map at 0x%llx: overlaps a mapped region", (unsigned long long)addr);
  if ((size_t)(i + 1) < s->nregions && s->regions[i + 1].base < addr + size)
    return fail(err, errlen, VTA_ERR_MEM, "cannot map at 0x%llx: overlaps a mapped region", (unsigned long long)addr);
  if (s->nregions == s->cap_regions) {
    size_t cap = s->cap_regions ? 2 * s->cap_regions : 16;
    region_t *r = realloc(s->regions, cap * sizeof *r);
    if (!r) return fail(err, errlen, VTA_ERR_ARG, "out of host memory");
    s->regions = r;
    s->cap_regions = cap;
  }
#if SIZE_MAX < UINT64_MAX /* a 32-bit host (a Pynq board's ARM): (size_t)size would wrap and map a short buffer */
  if (size > SIZE_MAX)
    return fail(err, errlen, VTA_ERR_ARG, "out of host memory for %llu bytes (more than this host's %u-bit "
                "address space)", (unsigned long long)size, (unsigned)(8 * sizeof(size_t)));
#endif
  uint8_t *data = calloc(1, (size_t)size);
  if (!data) return fail(err, errlen, VTA_ERR_ARG, "out of host memory for %llu bytes", (unsigned long long)size);
  size_t at = (size_t)(i + 1);
  memmove(&s->regions[at + 1], &s->regions[at], (s->nregions - at) * sizeof(region_t));
  s->regions[at] = (region_t){addr, size, data, NULL, NULL, 0};
  s->nregions++;
  return VTA_OK;
}

int vta_sim_unmap(vta_sim_t *s, uint64_t addr, char *err, size_t errlen) {
  long i = find_region(s, addr);
  if (i < 0 || s->regions[i].base != addr)
    return fail(err, errlen, VTA_ERR_MEM, "cannot unmap 0x%llx: no region starts there", (unsigned long long)addr);
  region_t *r = &s->regions[i];
  if (r->lent) reclaim_quads(s, r->wq, r->wq + r->size / 256 * 256);
  region_free(r);
  memmove(&s->regions[i], &s->regions[i + 1], (s->nregions - (size_t)i - 1) * sizeof(region_t));
  s->nregions--;
  return VTA_OK;
}

int vta_sim_write(vta_sim_t *s, uint64_t addr, const uint8_t *src, uint64_t n, char *err, size_t errlen) {
  uint8_t *d = resolve(s, addr, n);
  if (!d)
    return fail(err, errlen, VTA_ERR_MEM, "DRAM write [0x%llx, 0x%llx) is not inside one mapped region",
                (unsigned long long)addr, (unsigned long long)(addr + n));
  if (n) {
    region_t *r = &s->regions[find_region(s, addr)];
    dram_written(s, r, addr - r->base, n);
    memcpy(d, src, (size_t)n);
  }
  return VTA_OK;
}

int vta_sim_read(vta_sim_t *s, uint64_t addr, uint8_t *dst, uint64_t n, char *err, size_t errlen) {
  const uint8_t *d = resolve(s, addr, n);
  if (!d)
    return fail(err, errlen, VTA_ERR_MEM, "DRAM read [0x%llx, 0x%llx) is not inside one mapped region",
                (unsigned long long)addr, (unsigned long long)(addr + n));
  if (n) memcpy(dst, d, (size_t)n);
  return VTA_OK;
}

static uint8_t *sram_of(vta_sim_t *s, uint32_t mem, uint32_t *depth, uint32_t *elem) {
  switch (mem) {
    case MEM_UOP: *depth = s->p.uop_depth; *elem = 4; return (uint8_t *)s->uop;
    case MEM_WGT: *depth = s->p.wgt_depth; *elem = s->wgt_elem; return (uint8_t *)s->wgt;
    case MEM_INP: *depth = s->p.inp_depth; *elem = s->inp_elem; return (uint8_t *)s->inp;
    case MEM_ACC: *depth = s->p.acc_depth; *elem = s->acc_elem; return (uint8_t *)s->acc;
    default: return NULL;
  }
}

int vta_sim_sram(vta_sim_t *s, uint32_t mem, uint32_t index, uint32_t count, uint8_t *buf, int write,
                 char *err, size_t errlen) {
  uint32_t depth = 0, elem = 0;
  if (mem == MEM_OUT) {
    if (write) return fail(err, errlen, VTA_ERR_ARG, "the output buffer is read only here (compute writes it)");
    if ((uint64_t)index + count > s->p.acc_depth)
      return fail(err, errlen, VTA_ERR_ARG, "SRAM range [%u, %llu) exceeds the OUT buffer depth %u", index,
                  (unsigned long long)index + count, s->p.acc_depth);
    for (uint32_t r = index; r < index + count; r++) {
      uint8_t *dst = buf + (size_t)(r - index) * s->out_elem;
      if (s->out_stale[r])
        memcpy(dst, s->out + (size_t)r * s->out_elem, s->out_elem);
      else
        low_bytes(dst, s->acc + (size_t)r * s->out_elem, s->out_elem);
    }
    return VTA_OK;
  }
  uint8_t *base = sram_of(s, mem, &depth, &elem);
  if (!base)
    return fail(err, errlen, VTA_ERR_ARG, "unknown SRAM %u (allowed: 0 uop, 1 wgt, 2 inp, 3 acc, 4 out)", mem);
  if ((uint64_t)index + count > depth)
    return fail(err, errlen, VTA_ERR_ARG, "SRAM range [%u, %llu) exceeds the %s buffer depth %u", index,
                (unsigned long long)index + count, MEM_NAMES[mem], depth);
  if (count == 0) return VTA_OK; /* buf may be NULL, as for vta_sim_read/vta_sim_write with n == 0 */
  uint8_t *p = base + (size_t)index * elem;
  if (write) {
    memcpy(p, buf, (size_t)count * elem);
    if (mem == MEM_WGT) update_wgt_t(s, index, count);
    if (mem == MEM_UOP) uop_written(s, index, index + count);
    if (mem == MEM_ACC) /* a debugging write sets a row and its output copy alike */
      for (uint32_t r = index; r < index + count; r++)
        if (s->out_stale[r]) {
          s->out_stale[r] = 0;
          s->n_stale--;
        }
  } else {
    if (mem == MEM_WGT) raw_weights(s, index, (size_t)index + count - 1);
    memcpy(buf, p, (size_t)count * elem);
  }
  return VTA_OK;
}

/* ------------------------------------------------------------------ decoding and static checks */

static uint32_t bits(const uint64_t w[2], vta_field_t f) {
  uint64_t word = w[f.offset / 64];
  uint64_t v = word >> (f.offset % 64);
  return (uint32_t)(f.width == 64 ? v : v & ((UINT64_C(1) << f.width) - 1));
}

static uint32_t dram_elem_bytes(const vta_sim_t *s, uint32_t mem) {
  switch (mem) {
    case MEM_UOP: return 4;
    case MEM_WGT: return s->wgt_elem;
    case MEM_INP: return s->inp_elem;
    case MEM_ACC: return s->acc_elem;
    case MEM_OUT: return s->out_elem;
    default: return s->out_elem; /* ACC_8BIT: BATCH*BLOCK_OUT int8 */
  }
}

static void describe(const insn_t *in, char *buf, size_t n) {
  if (in->opcode == OP_LOAD || in->opcode == OP_STORE)
    snprintf(buf, n, "%s %s", OP_NAMES[in->opcode], in->mem_type < NUM_MEM_TYPES ? MEM_NAMES[in->mem_type] : "?");
  else if (in->opcode < NUM_OPCODES)
    snprintf(buf, n, "%s", OP_NAMES[in->opcode]);
  else
    snprintf(buf, n, "opcode %u", in->opcode);
}

#define INSN_FAIL(code, ...)                                                                             \
  do {                                                                                                   \
    char what_[32], msg_[400];                                                                           \
    describe(in, what_, sizeof what_);                                                                   \
    snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                            \
    stats->error_index = (int64_t)idx;                                                                   \
    return fail(err, errlen, code, "instruction %u (%s): %s", idx, what_, msg_);                         \
  } while (0)

/* Sets the token queues an instruction pops/pushes (DEP_QUEUE); refuses flags that mean nothing on its module.
 * pop_q/push_q[0] come from the prev flags, [1] from the next flags. */
static int route_flags(insn_t *in, uint32_t pop_prev, uint32_t pop_next, uint32_t push_prev, uint32_t push_next,
                       uint32_t idx, vta_stats_t *stats, char *err, size_t errlen) {
  const uint32_t set[NUM_DEP_FLAGS] = {pop_prev, pop_next, push_prev, push_next};
  uint8_t *slot[NUM_DEP_FLAGS] = {&in->pop_q[0], &in->pop_q[1], &in->push_q[0], &in->push_q[1]};
  for (int k = 0; k < NUM_DEP_FLAGS; k++) {
    uint8_t q = DEP_QUEUE[in->module][k];
    if (set[k] && q == NO_QUEUE)
      INSN_FAIL(VTA_ERR_INSN, "%s is set but the %s module has no %s stage (allowed: %s)", DEP_FLAG_NAMES[k],
                MODULE_NAMES[in->module], k == DEP_POP_PREV || k == DEP_PUSH_PREV ? "previous" : "next",
                DEP_FLAGS_ALLOWED[in->module]);
    *slot[k] = set[k] ? q : NO_QUEUE;
  }
  return VTA_OK;
}

static int decode_mem(vta_sim_t *s, const uint64_t w[2], insn_t *in, uint32_t idx, vta_stats_t *stats, char *err,
                      size_t errlen) {
  const vta_field_t *f = s->p.mem;
  in->mem_type = (uint8_t)bits(w, f[VTA_MEM_MEMORY_TYPE]);
  in->sram_base = bits(w, f[VTA_MEM_SRAM_BASE]);
  in->dram_base = bits(w, f[VTA_MEM_DRAM_BASE]);
  in->y_size = bits(w, f[VTA_MEM_Y_SIZE]);
  in->x_size = bits(w, f[VTA_MEM_X_SIZE]);
  in->x_stride = bits(w, f[VTA_MEM_X_STRIDE]);
  in->y_pad0 = bits(w, f[VTA_MEM_Y_PAD_0]);
  in->y_pad1 = bits(w, f[VTA_MEM_Y_PAD_1]);
  in->x_pad0 = bits(w, f[VTA_MEM_X_PAD_0]);
  in->x_pad1 = bits(w, f[VTA_MEM_X_PAD_1]);
  uint32_t depth;
  const char *buffer;
  if (in->opcode == OP_STORE) {
    /* Routed by opcode alone, so a NOP may carry any memory type (VTA's runtime emits store NOPs as UOP). */
    if (!(VTA_STORE_MEM_MASK >> in->mem_type & 1u) && in->x_size != 0)
      INSN_FAIL(VTA_ERR_INSN, "memory_type %u is not allowed on STORE (allowed: " VTA_STORE_MEM_ALLOWED ")",
                in->mem_type);
    depth = s->p.acc_depth;
    buffer = "output";
  } else {
    if (!(VTA_LOAD_MEM_MASK >> in->mem_type & 1u))
      INSN_FAIL(VTA_ERR_INSN, "memory_type %u is not allowed on LOAD (allowed: " VTA_LOAD_MEM_ALLOWED ")",
                in->mem_type);
    switch (in->mem_type) {
      case MEM_INP: depth = s->p.inp_depth; buffer = "input"; break;
      case MEM_WGT: depth = s->p.wgt_depth; buffer = "weight"; break;
      case MEM_UOP: depth = s->p.uop_depth; buffer = "micro-op"; break;
      default: depth = s->p.acc_depth; buffer = "accumulator"; break; /* ACC, ACC_8BIT */
    }
  }
  in->module = MODULE_OF[in->opcode][in->mem_type];
  int rc = route_flags(in, bits(w, f[VTA_MEM_POP_PREV]), bits(w, f[VTA_MEM_POP_NEXT]), bits(w, f[VTA_MEM_PUSH_PREV]),
                       bits(w, f[VTA_MEM_PUSH_NEXT]), idx, stats, err, errlen);
  if (rc) return rc;
  if (in->x_size == 0) return VTA_OK; /* NOP carrying dependency flags */
  if (in->y_size == 0) INSN_FAIL(VTA_ERR_INSN, "y_size is 0 with x_size %u (allowed: y_size >= 1)", in->x_size);
  if (in->opcode == OP_STORE && (in->y_pad0 | in->y_pad1 | in->x_pad0 | in->x_pad1))
    INSN_FAIL(VTA_ERR_INSN, "padding on a store (pads %u,%u,%u,%u; stores must have all pads 0)", in->y_pad0,
              in->y_pad1, in->x_pad0, in->x_pad1);
  uint64_t xt = (uint64_t)in->x_pad0 + in->x_size + in->x_pad1;
  uint64_t yt = (uint64_t)in->y_pad0 + in->y_size + in->y_pad1;
  uint64_t end = in->sram_base + xt * yt;
  if (end > depth)
    INSN_FAIL(VTA_ERR_INSN, "SRAM range [%u, %llu) exceeds the %s buffer depth %u", in->sram_base,
              (unsigned long long)end, buffer, depth);
  uint64_t e = dram_elem_bytes(s, in->mem_type);
  uint64_t lo = in->dram_base * e;
  uint64_t n = ((uint64_t)(in->y_size - 1) * in->x_stride + in->x_size) * e;
  in->dram = resolve(s, lo, n);
  if (!in->dram)
    INSN_FAIL(VTA_ERR_MEM, "DRAM range [0x%llx, 0x%llx) (dram_base %llu x %llu-byte elements) is not inside one "
              "mapped region", (unsigned long long)lo, (unsigned long long)(lo + n),
              (unsigned long long)in->dram_base, (unsigned long long)e);
  return VTA_OK;
}

static int decode_loop(vta_sim_t *s, const uint64_t w[2], insn_t *in, uint32_t idx, vta_stats_t *stats, char *err,
                       size_t errlen) {
  const vta_field_t *f = in->opcode == OP_GEMM ? s->p.gemm : s->p.alu;
  in->module = MODULE_OF[in->opcode][0];
  in->reset = (uint8_t)bits(w, f[VTA_LOOP_RESET]);
  in->uop_bgn = bits(w, f[VTA_LOOP_UOP_BGN]);
  in->uop_end = bits(w, f[VTA_LOOP_UOP_END]);
  in->iter_out = bits(w, f[VTA_LOOP_ITER_OUT]);
  in->iter_in = bits(w, f[VTA_LOOP_ITER_IN]);
  in->dst_out = bits(w, f[VTA_LOOP_DST_OUT]);
  in->dst_in = bits(w, f[VTA_LOOP_DST_IN]);
  in->src_out = bits(w, f[VTA_LOOP_SRC_OUT]);
  in->src_in = bits(w, f[VTA_LOOP_SRC_IN]);
  if (in->opcode == OP_GEMM) {
    in->wgt_out = bits(w, f[VTA_GEMM_WGT_OUT]);
    in->wgt_in = bits(w, f[VTA_GEMM_WGT_IN]);
  } else {
    vta_field_t fi = f[VTA_ALU_IMM];
    uint32_t raw = bits(w, fi);
    in->alu_op = (uint8_t)bits(w, f[VTA_ALU_OPCODE]);
    in->use_imm = (uint8_t)bits(w, f[VTA_ALU_USE_IMM]);
    in->imm = (raw >> (fi.width - 1)) ? (int32_t)((int64_t)raw - ((int64_t)1 << fi.width)) : (int32_t)raw;
    if (in->alu_op >= NUM_ALU_OPCODES)
      INSN_FAIL(VTA_ERR_INSN, "alu_opcode %u is unknown (allowed: " VTA_ALU_OPCODES_ALLOWED ")", in->alu_op);
  }
  if (in->uop_bgn > in->uop_end || in->uop_end > s->p.uop_depth)
    INSN_FAIL(VTA_ERR_INSN, "micro-op range uop_bgn=%u, uop_end=%u is not allowed (need uop_bgn <= uop_end <= %u, "
              "the micro-op buffer depth)", in->uop_bgn, in->uop_end, s->p.uop_depth);
  return route_flags(in, bits(w, f[VTA_LOOP_POP_PREV]), bits(w, f[VTA_LOOP_POP_NEXT]), bits(w, f[VTA_LOOP_PUSH_PREV]),
                     bits(w, f[VTA_LOOP_PUSH_NEXT]), idx, stats, err, errlen);
}

static int decode_all(vta_sim_t *s, const uint8_t *raw, uint32_t count, insn_t *out, vta_stats_t *stats, char *err,
                      size_t errlen) {
  for (uint32_t idx = 0; idx < count; idx++) {
    uint64_t w[2];
    memcpy(w, raw + (size_t)idx * VTA_INSN_BYTES, VTA_INSN_BYTES);
    insn_t *in = &out[idx];
    memset(in, 0, sizeof *in);
    in->opcode = (uint8_t)bits(w, s->p.mem[VTA_MEM_OPCODE]);
    int rc;
    switch (in->opcode) {
      case OP_LOAD:
      case OP_STORE: rc = decode_mem(s, w, in, idx, stats, err, errlen); break;
      case OP_GEMM:
      case OP_ALU: rc = decode_loop(s, w, in, idx, stats, err, errlen); break;
      case OP_FINISH:
        in->module = MODULE_OF[OP_FINISH][0];
        rc = route_flags(in, bits(w, s->p.mem[VTA_MEM_POP_PREV]), bits(w, s->p.mem[VTA_MEM_POP_NEXT]),
                         bits(w, s->p.mem[VTA_MEM_PUSH_PREV]), bits(w, s->p.mem[VTA_MEM_PUSH_NEXT]), idx, stats, err,
                         errlen);
        break;
      default: INSN_FAIL(VTA_ERR_INSN, "unknown opcode %u (allowed: " VTA_OPCODES_ALLOWED ")", in->opcode);
    }
    if (rc) return rc;
  }
  if (out[count - 1].opcode != OP_FINISH) {
    stats->error_index = (int64_t)count - 1;
    return fail(err, errlen, VTA_ERR_INSN, "instruction %u: the stream does not end with FINISH (VTA's runtime "
                "always ends a stream with FINISH; the last instruction is %s)", count - 1,
                out[count - 1].opcode < NUM_OPCODES ? OP_NAMES[out[count - 1].opcode] : "invalid");
  }
  return VTA_OK;
}

/* ------------------------------------------------------------------ execution */

static uint64_t iterations(const insn_t *in) {
  return (uint64_t)in->iter_out * in->iter_in * (in->uop_end - in->uop_bgn);
}

/* A LOAD or STORE's use of the shared DRAM bus (docs/simulator.md, "Timing model"): `beats` bus beats issued over
 * `span` cycles when it has the bus to itself (its beats, the gap after each burst and, for a LOAD, a cycle per
 * padding entry); the DRAM latency follows the last beat. Returns 0 for instructions that do not use the bus. */
static int bus_demand(const vta_sim_t *s, const insn_t *in, uint64_t *beats, uint64_t *span) {
  *beats = *span = 0;
  if ((in->opcode != OP_LOAD && in->opcode != OP_STORE) || in->x_size == 0) return 0;
  const uint64_t pad_cells = in->opcode != OP_LOAD ? 0
      : ((uint64_t)in->x_pad0 + in->x_size + in->x_pad1) * ((uint64_t)in->y_pad0 + in->y_size + in->y_pad1) -
            (uint64_t)in->x_size * in->y_size;
  const vta_dma_demand_t d = vta_dma_demand(&s->p, in->x_size, in->y_size, in->x_stride,
                                            dram_elem_bytes(s, in->mem_type), pad_cells);
  *beats = d.beats;
  *span = d.span;
  return 1;
}

/* Cycles of an instruction with the DRAM bus to itself. */
static uint64_t duration(const vta_sim_t *s, const insn_t *in) {
  const vta_params_t *p = &s->p;
  if (in->opcode == OP_FINISH) return 1;
  if (in->opcode == OP_GEMM || in->opcode == OP_ALU)
    return vta_compute_cycles(p, in->opcode == OP_GEMM, iterations(in));
  uint64_t beats, span;
  if (!bus_demand(s, in, &beats, &span)) return 1;
  return p->dram_latency + span;
}

/* Host work of an instruction (docs/simulator.md, "Budgets"): one unit per multiply-accumulate of a GEMM, per
 * lane an ALU or a reset GEMM writes, per byte a LOAD writes into an SRAM (padding included) or a STORE writes to
 * DRAM. `per` receives the units per micro-op iteration of GEMM/ALU (0 for the others). */
static uint64_t host_work(const vta_sim_t *s, const insn_t *in, uint64_t *per) {
  const vta_params_t *p = &s->p;
  *per = 0;
  switch (in->opcode) {
    case OP_LOAD: {
      if (in->x_size == 0) return 0;
      uint64_t xt = (uint64_t)in->x_pad0 + in->x_size + in->x_pad1;
      uint64_t yt = (uint64_t)in->y_pad0 + in->y_size + in->y_pad1;
      uint64_t elem = in->mem_type == MEM_ACC_8BIT ? s->acc_elem : dram_elem_bytes(s, in->mem_type);
      return xt * yt * elem; /* xt * yt <= the SRAM depth (checked at decode), so no overflow */
    }
    case OP_STORE: return in->x_size == 0 ? 0 : (uint64_t)in->x_size * in->y_size * s->out_elem;
    case OP_GEMM:
      *per = (uint64_t)p->batch * p->block_out * (in->reset && s->out_mode != 1 ? 1 : p->block_in);
      return mul_sat(iterations(in), *per);
    case OP_ALU:
      *per = (uint64_t)p->batch * p->block_out;
      return mul_sat(iterations(in), *per);
    default: return 0; /* FINISH */
  }
}

#ifdef VTA_X86_KERNELS
/* Region r's weight-layout cache (allocated at its first use), or 0 where it has none: a base that is not a multiple
 * of 256, or no host memory (the layouts are then built at every LOAD, as without a cache). */
static int layout_cache(region_t *r) {
  if (r->wq_bits) return 1;
  if (r->base % 256 || r->size < 256) return 0;
  const size_t slots = (size_t)(r->size / 256);
  void *wq = NULL;
  if (posix_memalign(&wq, 64, slots * 256)) return 0; /* read only where wq_bits says a slot was written */
  r->wq_bits = calloc(slots, 1);
  if (!r->wq_bits) {
    free(wq);
    return 0;
  }
  r->wq = wq;
  return 1;
}
#endif

/* A weight LOAD without padding, where the unsigned-input kernels exist: each tile goes from DRAM straight into
 * its quad shadow (what ReLU networks' GEMMs read), the SRAM bytes only when something reads them (raw_weights):
 * one pass over the tile instead of a copy and then a pass over the copy. A tile whose DRAM bytes were laid out
 * before and not written since takes its layout from the region's cache (region_t). */
static void load_weight_quads(vta_sim_t *s, const insn_t *in) {
#ifdef VTA_X86_KERNELS
  const size_t elem = dram_elem_bytes(s, MEM_WGT); /* == s->wgt_elem (16x16 int8) == 256 */
  region_t *r = &s->regions[find_region(s, in->dram_base * elem)]; /* decode_mem resolved it */
  const int cached = layout_cache(r);
  for (uint32_t y = 0; y < in->y_size; y++) {
    const int8_t *src = (const int8_t *)in->dram + (size_t)y * in->x_stride * elem;
    for (uint32_t x = 0; x < in->x_size; x++, src += elem) {
      const size_t t = (size_t)in->sram_base + (size_t)y * in->x_size + x;
      uint8_t *q = s->wgt_q + t * 256;
      if (!cached) {
        s->wgt_t_built[t] = (uint8_t)(quad_layout(s, t, src) | RAW_STALE);
        continue;
      }
      const size_t slot = (size_t)((const uint8_t *)src - r->data) / 256;
      if (!r->wq_bits[slot]) {
        r->wq_bits[slot] = quad_layout(s, t, src);
        memcpy(r->wq + slot * 256, q, 256);
      }
      s->wgt_qp[t] = r->wq + slot * 256; /* read in place (quads_in_a_row) */
      r->lent = 1;
      s->wgt_t_built[t] = (uint8_t)(r->wq_bits[slot] | RAW_STALE);
    }
  }
#else
  (void)s;
  (void)in;
#endif
}

static void exec_load(vta_sim_t *s, const insn_t *in) {
  uint32_t xt = in->x_pad0 + in->x_size + in->x_pad1;
  uint32_t yt = in->y_pad0 + in->y_size + in->y_pad1;
  if (in->mem_type == MEM_WGT && s->gemm_row_unsigned && xt == in->x_size && yt == in->y_size) {
    const uint64_t t0 = s->profile ? now_ns() : 0;
    load_weight_quads(s, in);
    if (s->profile) s->prof_ns[PROF_LAYOUT] += now_ns() - t0;
    return;
  }
  uint32_t depth = 0, elem = 0;
  uint32_t mem = in->mem_type == MEM_ACC_8BIT ? MEM_ACC : in->mem_type;
  uint8_t *sram = sram_of(s, mem, &depth, &elem);
  uint32_t src_elem = dram_elem_bytes(s, in->mem_type);
  if (mem == MEM_ACC && s->out_mode) /* only compute writes the output buffer */
    for (size_t r = in->sram_base; r < (size_t)in->sram_base + (size_t)xt * yt; r++) out_detach(s, r);
  for (uint32_t y = 0; y < yt; y++) {
    uint8_t *row = sram + ((size_t)in->sram_base + (size_t)y * xt) * elem;
    if (y < in->y_pad0 || y >= in->y_pad0 + in->y_size) {
      memset(row, 0, (size_t)xt * elem);
      continue;
    }
    const uint8_t *src = in->dram + (size_t)(y - in->y_pad0) * in->x_stride * src_elem;
    memset(row, 0, (size_t)in->x_pad0 * elem);
    uint8_t *dst = row + (size_t)in->x_pad0 * elem;
    if (in->mem_type == MEM_ACC_8BIT) {
      int32_t *d32 = (int32_t *)(void *)dst;
      const int8_t *s8 = (const int8_t *)src;
      for (size_t k = 0; k < (size_t)in->x_size * src_elem; k++) d32[k] = s8[k];
    } else {
      memcpy(dst, src, (size_t)in->x_size * elem);
    }
    memset(dst + (size_t)in->x_size * elem, 0, (size_t)in->x_pad1 * elem);
  }
  if (mem == MEM_WGT) update_wgt_t(s, in->sram_base, (size_t)xt * yt);
  if (mem == MEM_UOP) uop_written(s, in->sram_base, (uint64_t)in->sram_base + (uint64_t)xt * yt);
  (void)depth;
}

static void count_load(const vta_sim_t *s, const insn_t *in, vta_stats_t *st) {
  uint64_t n = (uint64_t)in->x_size * in->y_size;
  switch (in->mem_type) {
    case MEM_UOP: st->uop_load_nbytes += n * 4; break;
    case MEM_INP: st->inp_load_nbytes += n * s->inp_elem; break;
    case MEM_WGT: st->wgt_load_nbytes += n * s->wgt_elem; break;
    default: st->acc_load_nbytes += n * s->acc_elem; break; /* ACC_8BIT counted as ACC, as VTA does */
  }
}

static void exec_store(vta_sim_t *s, const insn_t *in) {
  const uint32_t lanes = s->p.batch * s->p.block_out;
  region_t *r = &s->regions[find_region(s, in->dram_base * dram_elem_bytes(s, in->mem_type))]; /* decode_mem's */
  dram_written(s, r, (uint64_t)(in->dram - r->data), ((uint64_t)(in->y_size - 1) * in->x_stride + in->x_size) * lanes);
  for (uint32_t y = 0; y < in->y_size; y++) { /* a row's entries are consecutive in the SRAM and in DRAM */
    const size_t r0 = (size_t)in->sram_base + (size_t)y * in->x_size;
    uint8_t *dst = in->dram + (size_t)y * in->x_stride * lanes;
    if (!s->n_stale) {
      low_bytes(dst, s->acc + r0 * lanes, (size_t)in->x_size * lanes);
      continue;
    }
    for (size_t x = 0; x < in->x_size; x++) {
      if (s->out_stale[r0 + x])
        memcpy(dst + x * lanes, s->out + (r0 + x) * lanes, lanes);
      else
        low_bytes(dst + x * lanes, s->acc + (r0 + x) * lanes, lanes);
    }
  }
}


/* The largest dst, src and wgt fields of micro-ops [bgn, end), kept for the next instructions that use them. */
static int fields_max(vta_sim_t *s, uint32_t bgn, uint32_t end) {
  for (int e = 0; e < FIELDS_CACHE; e++)
    if (s->fields_max[e].end == end && s->fields_max[e].bgn == bgn) return e;
  const vta_field_t *uf = s->p.uop;
  uint64_t dst = 0, src = 0, wgt = 0, dst_min = UINT64_MAX;
  for (uint32_t k = bgn; k < end; k++) {
    const uint64_t w[2] = {s->uop[k], 0};
    const uint64_t d = bits(w, uf[VTA_UOP_DST]), sr = bits(w, uf[VTA_UOP_SRC]), wg = bits(w, uf[VTA_UOP_WGT]);
    dst = d > dst ? d : dst;
    dst_min = d < dst_min ? d : dst_min;
    src = sr > src ? sr : src;
    wgt = wg > wgt ? wg : wgt;
  }
  const int e = (int)(s->next_fields_max++ % FIELDS_CACHE);
  s->fields_max[e].bgn = bgn;
  s->fields_max[e].end = end;
  s->fields_max[e].dst = dst;
  s->fields_max[e].dst_min = dst_min;
  s->fields_max[e].src = src;
  s->fields_max[e].wgt = wgt;
  return e;
}

/* Every index a GEMM/ALU instruction's iterations reach is inside its SRAM; checked before any write. */
static int check_indices(vta_sim_t *s, const insn_t *in, uint32_t idx, vta_stats_t *stats, char *err, size_t errlen) {
  if (iterations(in) == 0) return VTA_OK;
  const vta_field_t *uf = s->p.uop;
  uint64_t io = in->iter_out - 1, ii = in->iter_in - 1;
  int check_src = in->opcode == OP_GEMM ? !in->reset : !in->use_imm;
  int check_wgt = in->opcode == OP_GEMM && !in->reset;
  uint32_t src_depth = in->opcode == OP_GEMM ? s->p.inp_depth : s->p.acc_depth;
  const char *src_buf = in->opcode == OP_GEMM ? "input" : "accumulator";
  /* Each index is a micro-op field plus the same loop offset for every micro-op, so the largest fields decide;
   * the loop below runs only to name the first micro-op out of range. */
  const int e = fields_max(s, in->uop_bgn, in->uop_end);
  if (s->fields_max[e].dst + io * in->dst_out + ii * in->dst_in < s->p.acc_depth &&
      (!check_src || s->fields_max[e].src + io * in->src_out + ii * in->src_in < src_depth) &&
      (!check_wgt || s->fields_max[e].wgt + io * in->wgt_out + ii * in->wgt_in < s->p.wgt_depth))
    return VTA_OK;
  for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
    uint64_t w[2] = {s->uop[k], 0};
    uint64_t d = bits(w, uf[VTA_UOP_DST]) + io * in->dst_out + ii * in->dst_in;
    uint64_t sr = bits(w, uf[VTA_UOP_SRC]) + io * in->src_out + ii * in->src_in;
    uint64_t wg = bits(w, uf[VTA_UOP_WGT]) + io * in->wgt_out + ii * in->wgt_in;
    if (d >= s->p.acc_depth)
      INSN_FAIL(VTA_ERR_INSN, "micro-op %u reaches accumulator index %llu, beyond the depth %u", k,
                (unsigned long long)d, s->p.acc_depth);
    if (check_src && sr >= src_depth)
      INSN_FAIL(VTA_ERR_INSN, "micro-op %u reaches %s index %llu, beyond the depth %u", k, src_buf,
                (unsigned long long)sr, src_depth);
    if (check_wgt && wg >= s->p.wgt_depth)
      INSN_FAIL(VTA_ERR_INSN, "micro-op %u reaches weight index %llu, beyond the depth %u", k,
                (unsigned long long)wg, s->p.wgt_depth);
  }
  return VTA_OK;
}

/* The value of micro-op field f: (word >> shift) & mask, with the loop-invariant parts held in locals. */
typedef struct uop_field {
  uint32_t shift, mask;
} uop_field_t;

static uop_field_t uop_field(vta_field_t f) {
  return (uop_field_t){f.offset, f.width >= 32 ? UINT32_MAX : (UINT32_C(1) << f.width) - 1};
}

static void span_add(field_span_t *span, int64_t v) {
  if (v < span->min) span->min = v;
  if (v > span->max) span->max = v;
}

/* The GEMM's micro-ops as runs. The loops add the same offsets to every micro-op, so one split serves every
 * iteration. Wrapping int32 addition is order-free, so the runs compute what the micro-ops do one by one. */
static uint32_t find_runs(const vta_sim_t *s, const insn_t *in, uop_run_t *runs, field_span_t *dst,
                          field_span_t *src, field_span_t *wgt) {
  const uop_field_t fd = uop_field(s->p.uop[VTA_UOP_DST]), fs = uop_field(s->p.uop[VTA_UOP_SRC]),
                    fw = uop_field(s->p.uop[VTA_UOP_WGT]);
  uint32_t n = 0;
  int64_t prev_d = 0, prev_s = 0, run_w = -1;
  *dst = *src = *wgt = (field_span_t){INT64_MAX, -1};
  for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
    const uint32_t u = s->uop[k];
    const int64_t d = u >> fd.shift & fd.mask, sr = u >> fs.shift & fs.mask, wg = u >> fw.shift & fw.mask;
    span_add(dst, d);
    span_add(src, sr);
    span_add(wgt, wg);
    uop_run_t *r = n ? &runs[n - 1] : NULL;
    if (r && wg == run_w && (r->count == 1 || (d - prev_d == r->dstep && sr - prev_s == r->sstep))) {
      r->dstep = d - prev_d;
      r->sstep = sr - prev_s;
      r->count++;
    } else {
      runs[n++] = (uop_run_t){1, 1, (uint32_t)d, (uint32_t)sr, (uint32_t)wg, 0, 0, 0, 0};
      run_w = wg;
    }
    prev_d = d;
    prev_s = sr;
  }
  /* rows: consecutive runs alike (weight tile, length, steps) whose starts step by constants */
  uint32_t m = 0;
  for (uint32_t k = 0; k < n; k++) {
    uop_run_t *a = m ? &runs[m - 1] : NULL;
    const uop_run_t b = runs[k];
    if (a && a->wgt == b.wgt && a->count == b.count && a->dstep == b.dstep && a->sstep == b.sstep) {
      const int64_t drow = (int64_t)b.dst - a->dst, srow = (int64_t)b.src - a->src;
      if (a->rows == 1) {
        a->drow = drow;
        a->srow = srow;
        a->rows = 2;
        continue;
      }
      if (drow == (int64_t)a->rows * a->drow && srow == (int64_t)a->rows * a->srow) {
        a->rows++;
        continue;
      }
    }
    runs[m++] = b;
  }
  return m;
}

/* Micro-ops [a, b) of rows [r0, r0 + rows) of a run whose first micro-op reads acc / inp / tile, through `row` (NULL:
 * job->one per micro-op). */
static void gemm_range(const vta_sim_t *s, const gemm_job_t *job, gemm_row_fn row, const uop_run_t *run,
                       int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t a, uint32_t b, uint32_t r0,
                       uint32_t rows) {
  const ptrdiff_t lanes = (ptrdiff_t)(s->p.batch * s->p.block_out), inp_elem = (ptrdiff_t)s->inp_elem;
  const ptrdiff_t dstep = (ptrdiff_t)run->dstep * lanes, sstep = (ptrdiff_t)run->sstep * inp_elem,
                  drow = (ptrdiff_t)run->drow * lanes, srow = (ptrdiff_t)run->srow * inp_elem;
  acc += (ptrdiff_t)a * dstep + (ptrdiff_t)r0 * drow;
  inp += (ptrdiff_t)a * sstep + (ptrdiff_t)r0 * srow;
  if (job->fused > 1) { /* the inner loop's iterations in one call */
    job->tiles(acc, dstep, drow, inp, sstep, srow, tile, b - a, rows, s->p.batch, job->fused,
               (ptrdiff_t)job->in->src_in * inp_elem, (ptrdiff_t)job->in->wgt_in * (ptrdiff_t)job->stride);
    return;
  }
  if (row) { /* one call for all the rows: the tile is loaded once (61% of ResNet-18's rows are 7 long) */
    row(acc, dstep, drow, inp, sstep, srow, tile, b - a, rows, s->p.batch);
    return;
  }
  for (uint32_t r = 0; r < rows; r++, acc += drow, inp += srow) {
    for (uint32_t i = 0; i < b - a; i++)
      job->one(acc + (ptrdiff_t)i * dstep, inp + (ptrdiff_t)i * sstep, tile, s->p.batch, s->p.block_out,
              s->p.block_in);
  }
}

/* The k in [0, count) with lo <= d + k * step < hi, as [*a, *b) (step may be negative or zero). */
static void owned_range(int64_t d, int64_t step, uint32_t count, int64_t lo, int64_t hi, uint32_t *a, uint32_t *b) {
  int64_t first = 0, end = count;
  if (step == 0) {
    if (d < lo || d >= hi) end = 0;
  } else if (step > 0) { /* k >= ceil((lo - d) / step), k < ceil((hi - d) / step); hi may be INT64_MAX */
    if (lo > d) first = (lo - d) / step + ((lo - d) % step != 0);
    end = hi > d ? (hi - d) / step + ((hi - d) % step != 0) : 0;
  } else { /* k > (d - hi) / |step|, k <= (d - lo) / |step| */
    const int64_t m = -step;
    if (d >= hi) first = (d - hi) / m + 1;
    end = d >= lo ? (d - lo) / m + 1 : 0;
  }
  *a = (uint32_t)(first < (int64_t)count ? first : count);
  *b = (uint32_t)(end < (int64_t)count ? (end > first ? end : first) : count);
  if (*b < *a) *b = *a;
}

/* One thread's share of a GEMM: the micro-op iterations whose accumulator index d lies in [lo, hi), in program
 * order. Each accumulator entry thus has one owner that applies all of its updates in the sequential order, so
 * the result is bit-identical to one thread's, whatever the split. One thread: lo = 0, hi = INT64_MAX. */
static void gemm_share(const vta_sim_t *s, const gemm_job_t *job, int64_t lo, int64_t hi) {
  const insn_t *in = job->in;
  const uop_field_t fd = uop_field(s->p.uop[VTA_UOP_DST]);
  const uint32_t lanes = s->p.batch * s->p.block_out, batch = s->p.batch, bo = s->p.block_out, bi = s->p.block_in;
  const size_t inp_elem = s->inp_elem, wstride = job->stride;
  const uint32_t *const uop = s->uop;
  const gemm_fn gemm = job->one;
  const uop_run_t *runs = job->runs;
  const uint32_t nruns = job->nruns;
  const int whole = lo <= 0 && hi == INT64_MAX; /* one thread: every micro-op */
  const uint32_t jstep = job->fused > 1 ? job->fused : 1; /* fused: the inner loop is one call (gemm_range) */
  for (uint32_t i = 0; i < in->iter_out; i++) {
    for (uint32_t j = 0; j < in->iter_in; j += jstep) {
      const size_t d0 = (size_t)i * in->dst_out + (size_t)j * in->dst_in;
      if (in->reset) {
        for (uint32_t k = in->uop_bgn; k < in->uop_end; k++)
          memset(s->acc + (d0 + (uop[k] >> fd.shift & fd.mask)) * lanes, 0, (size_t)lanes * 4);
        continue;
      }
      const size_t s0 = (size_t)i * in->src_out + (size_t)j * in->src_in;
      const size_t w0 = (size_t)i * in->wgt_out + (size_t)j * in->wgt_in;
      for (uint32_t r = 0; r < nruns; r++) {
        const uop_run_t *run = &runs[r];
        const size_t d = d0 + run->dst;
        int32_t *acc = s->acc + d * lanes;
        const int8_t *inp = s->inp + (s0 + run->src) * inp_elem;
        const uint8_t *tile = job->shadow + (w0 + run->wgt - job->first) * wstride;
        const uint8_t built = s->wgt_t_built[w0 + run->wgt];
        const gemm_row_fn row = job->row_sum4 && (built & SHADOW_SUM4)   ? job->row_sum4
                                : job->row_sum2 && (built & SHADOW_SUM2) ? job->row_sum2
                                                                         : job->row;
        if (run->count == 1 && run->rows == 1 && job->fused < 2) { /* programs without runs: one call */
          if (!whole && ((int64_t)d < lo || (int64_t)d >= hi)) continue;
          if (row)
            row(acc, 0, 0, inp, 0, 0, tile, 1, 1, batch);
          else
            gemm(acc, inp, tile, batch, bo, bi);
          continue;
        }
        if (whole) {
          gemm_range(s, job, row, run, acc, inp, tile, 0, run->count, 0, run->rows);
          continue;
        }
        if (run->dstep == 1 && run->drow == (int64_t)run->count) { /* indices [d, d + rows * count): a block */
          const int64_t n = (int64_t)run->count, total = n * run->rows;
          const int64_t k0 = lo > (int64_t)d ? lo - (int64_t)d : 0,
                        k1 = hi - (int64_t)d < total ? hi - (int64_t)d : total;
          if (k0 >= k1) continue;
          uint32_t r0 = (uint32_t)(k0 / n), i0 = (uint32_t)(k0 % n), r1 = (uint32_t)((k1 - 1) / n),
                   i1 = (uint32_t)((k1 - 1) % n + 1); /* first row and column, last row and its end */
          if (r0 == r1) {
            gemm_range(s, job, row, run, acc, inp, tile, i0, i1, r0, 1);
            continue;
          }
          if (i0) gemm_range(s, job, row, run, acc, inp, tile, i0, run->count, r0++, 1);
          if (i1 < run->count) gemm_range(s, job, row, run, acc, inp, tile, 0, i1, r1--, 1);
          if (r0 <= r1) gemm_range(s, job, row, run, acc, inp, tile, 0, run->count, r0, r1 - r0 + 1);
          continue;
        }
        for (uint32_t r = 0; r < run->rows; r++) {
          uint32_t a, b;
          owned_range((int64_t)d + (int64_t)r * run->drow, run->dstep, run->count, lo, hi, &a, &b);
          if (a < b) gemm_range(s, job, row, run, acc, inp, tile, a, b, r, 1);
        }
      }
    }
  }
}

/* gemm_share on the calling thread, in the tile configuration of the amx paths where the GEMM has kernels to run:
 * tile state is per thread (each worker loads its own) and is released at the end, so nothing of it is left for
 * another library's AMX code, or for the OS to save at a context switch, between GEMMs. */
static void gemm_part(const vta_sim_t *s, const gemm_job_t *job, int64_t lo, int64_t hi) {
  const int tiles = s->tile_enter && !job->in->reset && job->nruns;
  if (tiles) s->tile_enter(s->tile_cfg);
  gemm_share(s, job, lo, hi);
  if (tiles) s->tile_leave();
}

/* ------------------------------------------------------------------ GEMM threads
 *
 * Threads live as long as the simulator's thread setting (vta_sim_set_threads), not one instruction: a split
 * GEMM publishes a job (a new generation number) and each worker runs its share. A worker that just finished
 * spins for a short while before it sleeps on the condition variable, so the back-to-back GEMMs of a network
 * wake it in well under a microsecond, and an idle simulator costs no CPU. Counters are GCC/Clang __atomic
 * builtins; every other field of the job is written before the generation is published (release) and read
 * after it is seen (acquire). The mutex and condition variables are touched only when someone sleeps: a sleeper
 * announces itself (sleepers, caller_waits) before its last check, and the other side reads that after its own
 * update, both sequentially consistent, so one of the two always sees the other (no lost wake-up) and a spinning
 * pair never makes a system call (a futex wake costs tens of microseconds in a VM). */
#define POOL_SPINS 2000 /* pause instructions the caller spins for its workers before it sleeps (~50 us on x86-64) */
/* A worker spins longer, ~0.5 ms: a network's split GEMMs come tens of microseconds apart, with loads and ALU
 * work between them, and a sleeping worker costs each one a futex wake (measured ~8 us on average per split GEMM
 * of ResNet-18 with the 50 us spin). A run that has split GEMMs also wakes sleeping workers at its start (pool_poke)
 * so that they are spinning by its first one. */
#define POOL_WORKER_SPINS 20000
/* A worker that came too late for a recent job (the caller ran its share: the machine is busy) yields its CPU every
 * so many pauses (~2 us) while it spins, so that the threads waiting for that CPU run instead of a spin; on time
 * for POOL_LATE_JOBS jobs in a row, it spins without yielding again (a yield costs a system call). */
#define POOL_YIELD_EVERY 64
#define POOL_LATE_JOBS 64

static void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

struct gemm_pool {
  vta_sim_t *s;
  pid_t pid;           /* the process whose threads these are (a forked child has none of them) */
  uint32_t nthreads;   /* shares per split GEMM (the simulator's threads) */
  uint32_t nstarted;   /* workers running: share t is worker t-1's for t <= nstarted, else the caller's */
  pthread_t tid[VTA_SIM_MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  gemm_job_t job; /* the job, and each share's accumulator indices [bound[t], bound[t+1]) */
  int64_t bound[VTA_SIM_MAX_THREADS + 1];
  uint64_t generation; /* __atomic: bumped per job */
  uint64_t poke;       /* __atomic: bumped to wake sleeping workers without a job (pool_poke) */
  uint32_t pending;    /* __atomic: shares of the current job that workers took and have not finished */
  uint64_t claim[VTA_SIM_MAX_THREADS + 1]; /* __atomic: the job (generation) whose share t was last taken */
  uint32_t sleepers;   /* __atomic: workers about to wait, or waiting, on `wake` */
  uint32_t caller_waits; /* __atomic: the caller is about to wait, or waiting, on `done` */
  int stop;            /* __atomic */
};

typedef struct pool_worker {
  gemm_pool_t *pool;
  uint32_t part;
} pool_worker_t;

static void *pool_main(void *arg) {
  pool_worker_t w = *(pool_worker_t *)arg;
  free(arg);
  gemm_pool_t *pool = w.pool;
  uint64_t seen = 0;
  uint32_t late = 0; /* jobs left to yield while spinning (POOL_YIELD_EVERY) */
  for (;;) {
    uint64_t g = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; g == seen && i < POOL_WORKER_SPINS && !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE);
         i++) {
      if (late && i % POOL_YIELD_EVERY == POOL_YIELD_EVERY - 1)
        sched_yield(); /* the CPU is contended: a thread waiting for it (the caller's, or other load) gets it */
      else
        cpu_pause();
      g = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE);
    }
    if (g == seen) {
      pthread_mutex_lock(&pool->mu);
      __atomic_add_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
      const uint64_t poke = __atomic_load_n(&pool->poke, __ATOMIC_SEQ_CST);
      while ((g = __atomic_load_n(&pool->generation, __ATOMIC_SEQ_CST)) == seen &&
             __atomic_load_n(&pool->poke, __ATOMIC_SEQ_CST) == poke && !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&pool->wake, &pool->mu);
      __atomic_sub_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&pool->mu);
    }
    if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) return NULL;
    if (g == seen) continue; /* poked: spin for the job that is coming */
    seen = g;
    uint64_t old = __atomic_load_n(&pool->claim[w.part], __ATOMIC_ACQUIRE);
    if (old >= g || !__atomic_compare_exchange_n(&pool->claim[w.part], &old, g, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      late = POOL_LATE_JOBS; /* the caller ran this share itself: this worker came too late */
      continue;
    }
    if (late) late--;
    gemm_part(pool->s, &pool->job, pool->bound[w.part], pool->bound[w.part + 1]);
    if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&pool->caller_waits, __ATOMIC_SEQ_CST)) {
      pthread_mutex_lock(&pool->mu);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->mu);
    }
  }
}

/* Wake sleeping workers ahead of the split GEMMs a run is about to have (best effort: a worker that misses the
 * poke is woken by the first job, as always). */
static void pool_poke(gemm_pool_t *pool) {
  __atomic_add_fetch(&pool->poke, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
  }
}

static void pool_destroy(gemm_pool_t *pool) {
  if (!pool) return;
  if (pool->pid != getpid()) { /* inherited through fork: its threads live in the parent; only the memory is ours */
    free(pool);
    return;
  }
  pthread_mutex_lock(&pool->mu);
  __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  for (uint32_t t = 0; t < pool->nstarted; t++) pthread_join(pool->tid[t], NULL);
  pthread_cond_destroy(&pool->wake);
  pthread_cond_destroy(&pool->done);
  pthread_mutex_destroy(&pool->mu);
  free(pool);
}

/* Workers for shares 1..nthreads-1; NULL only when out of memory. Workers that cannot be started leave their
 * shares to the calling thread (pool_run), so results never depend on how many started. */
static gemm_pool_t *pool_create(vta_sim_t *s, uint32_t nthreads) {
  gemm_pool_t *pool = calloc(1, sizeof *pool);
  if (!pool) return NULL;
  pool->s = s;
  pool->pid = getpid();
  pool->nthreads = nthreads;
  if (pthread_mutex_init(&pool->mu, NULL)) {
    free(pool);
    return NULL;
  }
  if (pthread_cond_init(&pool->wake, NULL)) {
    pthread_mutex_destroy(&pool->mu);
    free(pool);
    return NULL;
  }
  if (pthread_cond_init(&pool->done, NULL)) {
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
    return NULL;
  }
  for (uint32_t t = 1; t < nthreads; t++) {
    pool_worker_t *w = malloc(sizeof *w);
    if (!w) break;
    *w = (pool_worker_t){pool, t};
    if (pthread_create(&pool->tid[pool->nstarted], NULL, pool_main, w)) {
      free(w);
      break;
    }
    pool->nstarted++;
  }
  return pool;
}

/* Run every share of one split GEMM: workers take shares 1..nstarted, the caller share 0 and the rest. */
static void pool_run(gemm_pool_t *pool, const gemm_job_t *job, int64_t dmin, int64_t dmax) {
  vta_sim_t *s = pool->s;
  const insn_t *in = job->in;
  /* shares of equal spans of the accumulator indices the GEMM touches (loop factors are unsigned) */
  const uint32_t n = pool->nthreads;
  const int64_t span = dmax + (int64_t)(in->iter_out - 1) * in->dst_out + (int64_t)(in->iter_in - 1) * in->dst_in -
                       dmin + 1;
  for (uint32_t t = 0; t < n; t++) pool->bound[t] = dmin + span * t / n;
  pool->bound[n] = INT64_MAX;
  uint64_t g = 0;
  if (pool->nstarted) {
    pool->job = *job;
    __atomic_store_n(&pool->pending, pool->nstarted, __ATOMIC_RELEASE);
    g = __atomic_add_fetch(&pool->generation, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST)) {
      pthread_mutex_lock(&pool->mu);
      pthread_cond_broadcast(&pool->wake);
      pthread_mutex_unlock(&pool->mu);
    }
  }
  gemm_part(s, job, pool->bound[0], pool->bound[1]);
  for (uint32_t t = pool->nstarted + 1; t < n; t++) gemm_part(s, job, pool->bound[t], pool->bound[t + 1]);
  if (!pool->nstarted) return;
  /* A share whose worker has not started it yet (descheduled by the machine's other load, or still waking up) is
   * run here rather than waited for; the worker then skips it. Either way each share runs once, so the result
   * does not depend on who ran it. */
  for (uint32_t t = 1; t <= pool->nstarted; t++) {
    uint64_t old = __atomic_load_n(&pool->claim[t], __ATOMIC_ACQUIRE);
    if (old < g && __atomic_compare_exchange_n(&pool->claim[t], &old, g, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      gemm_part(s, job, pool->bound[t], pool->bound[t + 1]);
      __atomic_sub_fetch(&pool->pending, 1, __ATOMIC_SEQ_CST);
    }
  }
  for (uint32_t i = 0; i < POOL_SPINS && __atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE); i++) cpu_pause();
  if (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&pool->mu);
    __atomic_store_n(&pool->caller_waits, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&pool->pending, __ATOMIC_SEQ_CST)) pthread_cond_wait(&pool->done, &pool->mu);
    __atomic_store_n(&pool->caller_waits, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pool->mu);
  }
}

/* Rows first, first + step, ... (n of them) follow their accumulators again; contiguous ones in one pass that
 * vectorises (the count of rows it attaches is the sum of their 0/1 flags). */
static void attach_rows(vta_sim_t *s, size_t first, uint32_t n, int64_t step) {
  uint8_t *f = s->out_stale + first;
  uint64_t attached = 0;
  if (step == 1 || n == 1) {
    for (uint32_t k = 0; k < n; k++) attached += f[k];
    memset(f, 0, n);
  } else {
    for (uint32_t k = 0; k < n; k++) {
      uint8_t *g = f + (ptrdiff_t)((int64_t)k * step);
      attached += *g;
      *g = 0;
    }
  }
  s->n_stale -= attached;
}

/* The accumulator rows a GEMM or ALU instruction writes get their narrowed result as output copy again. */
static void out_follow(vta_sim_t *s, const insn_t *in) {
  if (!iterations(in) || in->uop_end <= in->uop_bgn) return;
  /* Rows [lo, hi] hold every row the instruction writes (check_indices proved hi inside the SRAM): most
   * instructions find no stale row there (a virtual thread's rows while the other thread's were reset), and the
   * walk below is skipped. */
  const int e = fields_max(s, in->uop_bgn, in->uop_end);
  const size_t lo = s->fields_max[e].dst_min,
               hi = s->fields_max[e].dst + (size_t)(in->iter_out - 1) * in->dst_out + (size_t)(in->iter_in - 1) * in->dst_in;
  if (!memchr(s->out_stale + lo, 1, hi - lo + 1)) return;
  /* a loop whose dst factor is 0 writes the same rows at every step: one step covers them */
  const uint32_t io = in->dst_out ? in->iter_out : 1, ii = in->dst_in ? in->iter_in : 1;
  const uop_run_t *runs = NULL;
  uint32_t nruns = 0;
  if (in->opcode == OP_GEMM) /* exec_gemm has just found the kernel's runs: their rows, a step apart */
    for (int k = 0; k < KERNEL_CACHE; k++)
      if (s->kernels[k].end == in->uop_end && s->kernels[k].bgn == in->uop_bgn) {
        runs = s->runs + in->uop_bgn;
        nruns = s->kernels[k].nruns;
      }
  if (runs) {
    for (uint32_t i = 0; i < io && s->n_stale; i++)
      for (uint32_t j = 0; j < ii; j++)
        for (uint32_t r = 0; r < nruns; r++) {
          const uop_run_t *u = &runs[r];
          const size_t base = u->dst + (size_t)i * in->dst_out + (size_t)j * in->dst_in;
          for (uint32_t row = 0; row < u->rows; row++)
            attach_rows(s, base + (size_t)((int64_t)row * u->drow), u->count, u->dstep);
        }
    return;
  }
  const uop_field_t fd = uop_field(s->p.uop[VTA_UOP_DST]);
  for (uint32_t i = 0; i < io && s->n_stale; i++) /* the inner loop's rows, dst_in apart */
    for (uint32_t k = in->uop_bgn; k < in->uop_end; k++)
      attach_rows(s, (s->uop[k] >> fd.shift & fd.mask) + (size_t)i * in->dst_out, ii, in->dst_in);
}

/* A reset GEMM's output copies: VTA's HLS (out_mode 1) writes the low bytes of acc[dst] + the dot product of the
 * input and weight rows its micro-op names, computed before the reset (vta.cc's gemm); its Chisel (2) writes none.
 * Micro-op by micro-op, zeroing as it goes (a later micro-op on the same row adds to 0). A reset's input and
 * weight indices are not checked (nothing else reads them): they wrap at the SRAM depth, as the hardware's address
 * bits do. */
static void reset_out(vta_sim_t *s, const insn_t *in) {
  const vta_field_t *uf = s->p.uop;
  const uop_field_t fd = uop_field(uf[VTA_UOP_DST]), fs = uop_field(uf[VTA_UOP_SRC]), fw = uop_field(uf[VTA_UOP_WGT]);
  const uint32_t batch = s->p.batch, bo = s->p.block_out, bi = s->p.block_in, lanes = batch * bo;
  for (uint32_t i = 0; i < in->iter_out; i++)
    for (uint32_t j = 0; j < in->iter_in; j++)
      for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
        const uint32_t u = s->uop[k];
        const size_t d = (u >> fd.shift & fd.mask) + (size_t)i * in->dst_out + (size_t)j * in->dst_in;
        out_detach(s, d);
        if (s->out_mode != 1) continue;
        const size_t sr = ((u >> fs.shift & fs.mask) + (size_t)i * in->src_out + (size_t)j * in->src_in) % s->p.inp_depth;
        const size_t w = ((u >> fw.shift & fw.mask) + (size_t)i * in->wgt_out + (size_t)j * in->wgt_in) % s->p.wgt_depth;
        raw_weights(s, w, w);
        const int8_t *x = s->inp + sr * s->inp_elem, *wt = s->wgt + w * s->wgt_elem;
        int32_t *a = s->acc + d * lanes;
        for (uint32_t b = 0; b < batch; b++)
          for (uint32_t o = 0; o < bo; o++) {
            uint32_t sum = (uint32_t)a[b * bo + o];
            for (uint32_t c = 0; c < bi; c++) sum += (uint32_t)((int32_t)x[b * bi + c] * (int32_t)wt[o * bi + c]);
            s->out[d * lanes + b * bo + o] = (uint8_t)(sum & 0xffu);
            a[b * bo + o] = 0;
          }
      }
}

static void exec_gemm(vta_sim_t *s, const insn_t *in, int may_split);

/* reset_out for VTA's HLS through the GEMM kernels: where the reset's micro-ops name distinct accumulator rows and
 * input and weight rows inside the SRAMs (no wrap), "micro-op by micro-op, zeroing as it goes" is the same as
 * one non-reset GEMM (acc[dst] += dot) followed by each row's low bytes into its output copy; exec_gemm's reset
 * then zeroes the rows. Returns 0 (nothing done) where that does not hold, for reset_out to do it row by row.
 * Why: the row-by-row dot products cost ~4x the whole network's GEMM time on ResNet-18 (one per output row). */
static int reset_out_fast(vta_sim_t *s, const insn_t *in) {
  if (!iterations(in) || in->uop_end <= in->uop_bgn) return 1;
  const int e = fields_max(s, in->uop_bgn, in->uop_end);
  const uint64_t io = in->iter_out - 1, ii = in->iter_in - 1;
  if (s->fields_max[e].src + io * in->src_out + ii * in->src_in >= s->p.inp_depth ||
      s->fields_max[e].wgt + io * in->wgt_out + ii * in->wgt_in >= s->p.wgt_depth)
    return 0;
  const uop_field_t fd = uop_field(s->p.uop[VTA_UOP_DST]);
  int distinct = 1;
  for (uint32_t i = 0; i < in->iter_out && distinct; i++) /* check_indices proved every row inside the SRAM */
    for (uint32_t j = 0; j < in->iter_in && distinct; j++)
      for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
        const size_t d = (s->uop[k] >> fd.shift & fd.mask) + (size_t)i * in->dst_out + (size_t)j * in->dst_in;
        if (s->reset_seen[d]) {
          distinct = 0;
          break;
        }
        s->reset_seen[d] = 1;
      }
  if (distinct) {
    insn_t sum = *in;
    sum.reset = 0;
    exec_gemm(s, &sum, 0); /* on this thread: a reset's sums are one micro-op per row, too little to share */
  }
  for (uint32_t i = 0; i < in->iter_out; i++) /* clear the scratch; where distinct, keep each row's bytes */
    for (uint32_t j = 0; j < in->iter_in; j++)
      for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
        const size_t d = (s->uop[k] >> fd.shift & fd.mask) + (size_t)i * in->dst_out + (size_t)j * in->dst_in;
        if (!s->reset_seen[d]) continue;
        s->reset_seen[d] = 0;
        if (distinct) out_keep(s, d);
      }
  return distinct;
}

/* Whether a GEMM instruction is split over the simulator's threads (a reset, or a small one, is not). */
static int splits(const vta_sim_t *s, const insn_t *in) {
  return !in->reset && s->threads > 1 && iterations(in) &&
         mul_sat(iterations(in), (uint64_t)s->p.batch * s->p.block_out * s->p.block_in) >= s->par_min_macs;
}

/* A GEMM of at least par_min_macs multiply-accumulates is split over s->threads shares (docs/simulator.md,
 * "Threads"); smaller ones, and resets, run on the calling thread. The threads start at the first split GEMM, so
 * a simulator that never splits one never starts a thread. */

static void exec_gemm(vta_sim_t *s, const insn_t *in, int may_split) {
  gemm_job_t job = {in,     s->runs + in->uop_bgn, 0,    s->gemm_row, NULL, NULL, s->gemm, s->wgt_t,
                    s->wgt_t_stride, 0, NULL, 1};
  field_span_t dst = {0, 0};
  if (!in->reset && in->uop_end > in->uop_bgn && iterations(in)) { /* a kernel runs many times between loads */
    int e = 0;
    while (e < KERNEL_CACHE && !(s->kernels[e].end == in->uop_end && s->kernels[e].bgn == in->uop_bgn)) e++;
    if (e == KERNEL_CACHE) {
      uop_written(s, in->uop_bgn, in->uop_end); /* their runs' slots are overwritten now */
      e = (int)(s->next_kernel++ % KERNEL_CACHE);
      s->kernels[e].nruns = find_runs(s, in, s->runs + in->uop_bgn, &s->kernels[e].dst, &s->kernels[e].src,
                                      &s->kernels[e].wgt);
      s->kernels[e].bgn = in->uop_bgn;
      s->kernels[e].end = in->uop_end;
    }
    job.nruns = s->kernels[e].nruns;
    dst = s->kernels[e].dst;
    /* the entries the loops reach (check_indices proved them inside the SRAMs) */
    const field_span_t src = s->kernels[e].src, wgt = s->kernels[e].wgt;
    const size_t i1 = in->iter_out - 1, j1 = in->iter_in - 1;
    const size_t src_end = (size_t)src.max + i1 * in->src_out + j1 * in->src_in;
    const size_t wgt_end = (size_t)wgt.max + i1 * in->wgt_out + j1 * in->wgt_in;
    int kind = SHADOW_OWN;
    if (s->gemm_row_unsigned && (s->quads_any_sign || inputs_unsigned(s, (size_t)src.min, src_end))) {
      job.row = s->gemm_row_unsigned;
      job.row_sum2 = s->gemm_row_sum2;
      job.row_sum4 = s->gemm_row_sum4;
      job.one = NULL; /* the row kernels take lone micro-ops too */
      job.stride = 256;
      kind = SHADOW_QUADS;
      if (s->gemm_tiles && in->dst_in == 0 && in->iter_in > 1) { /* every j adds into the same accumulators */
        job.tiles = s->gemm_tiles;
        job.fused = in->iter_in;
      }
    }
    const uint64_t t0 = s->profile ? now_ns() : 0;
    need_shadows(s, kind, (size_t)wgt.min, wgt_end);
    if (kind == SHADOW_QUADS) {
      job.shadow = quads_in_a_row(s, (size_t)wgt.min, wgt_end);
      job.first = (size_t)wgt.min;
    }
    if (s->profile) s->prof_ns[PROF_LAYOUT] += now_ns() - t0;
  }
  if (!job.nruns || !may_split || !splits(s, in)) {
    gemm_part(s, &job, 0, INT64_MAX);
    return;
  }
  if (s->pool && s->pool->pid != getpid()) { /* inherited through fork: start this process's own threads */
    pool_destroy(s->pool);
    s->pool = NULL;
  }
  if (!s->pool) s->pool = pool_create(s, s->threads);
  if (!s->pool) { /* out of memory: one thread computes the same */
    gemm_part(s, &job, 0, INT64_MAX);
    return;
  }
  pool_run(s->pool, &job, dst.min, dst.max);
}

static int32_t alu_apply(uint32_t op, int32_t a, int32_t b) {
  switch (op) {
    case ALU_MIN: return a < b ? a : b;
    case ALU_MAX: return a > b ? a : b;
    case ALU_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
    case ALU_MUL: return (int32_t)((uint32_t)a * (uint32_t)b);
    default: { /* SHR: negative amount shifts left */
      if (b >= 0) {
        int sh = b > VTA_SHIFT_MAX ? VTA_SHIFT_MAX : b;
        return a >= 0 ? a >> sh : ~(~a >> sh);
      }
      int sh = b < -VTA_SHIFT_MAX ? VTA_SHIFT_MAX : -b;
      return (int32_t)((uint32_t)a << sh);
    }
  }
}

/* dst[l] = op(dst[l], src ? src[l] : imm) over n lanes: one loop per operation, so the compiler vectorises
 * them (compiled twice: for the baseline ISA and, in x86 builds, for AVX2, the ALU of every x86 kernel path). */
#define ALU_LANES(name, attr)                                                                              \
  attr static void name(uint32_t op, int32_t *dst, const int32_t *src, int32_t imm, uint32_t n) {          \
    if (src) {                                                                                             \
      switch (op) {                                                                                        \
        case ALU_MIN: for (uint32_t l = 0; l < n; l++) dst[l] = dst[l] < src[l] ? dst[l] : src[l]; break;  \
        case ALU_MAX: for (uint32_t l = 0; l < n; l++) dst[l] = dst[l] > src[l] ? dst[l] : src[l]; break;  \
        case ALU_ADD:                                                                                      \
          for (uint32_t l = 0; l < n; l++) dst[l] = (int32_t)((uint32_t)dst[l] + (uint32_t)src[l]);        \
          break;                                                                                           \
        case ALU_MUL:                                                                                      \
          for (uint32_t l = 0; l < n; l++) dst[l] = (int32_t)((uint32_t)dst[l] * (uint32_t)src[l]);        \
          break;                                                                                           \
        default: for (uint32_t l = 0; l < n; l++) dst[l] = alu_apply(ALU_SHR, dst[l], src[l]); break;      \
      }                                                                                                    \
      return;                                                                                              \
    }                                                                                                      \
    switch (op) {                                                                                          \
      case ALU_MIN: for (uint32_t l = 0; l < n; l++) dst[l] = dst[l] < imm ? dst[l] : imm; break;          \
      case ALU_MAX: for (uint32_t l = 0; l < n; l++) dst[l] = dst[l] > imm ? dst[l] : imm; break;          \
      case ALU_ADD: for (uint32_t l = 0; l < n; l++) dst[l] = (int32_t)((uint32_t)dst[l] + (uint32_t)imm); break; \
      case ALU_MUL: for (uint32_t l = 0; l < n; l++) dst[l] = (int32_t)((uint32_t)dst[l] * (uint32_t)imm); break; \
      default:                                                                                             \
        if (imm >= 0) {                                                                                    \
          const int sh = imm > VTA_SHIFT_MAX ? VTA_SHIFT_MAX : imm;                                        \
          for (uint32_t l = 0; l < n; l++) dst[l] = dst[l] >= 0 ? dst[l] >> sh : ~(~dst[l] >> sh);         \
        } else {                                                                                           \
          const int sh = imm < -VTA_SHIFT_MAX ? VTA_SHIFT_MAX : -imm;                                      \
          for (uint32_t l = 0; l < n; l++) dst[l] = (int32_t)((uint32_t)dst[l] << sh);                     \
        }                                                                                                  \
        break;                                                                                             \
    }                                                                                                      \
  }

ALU_LANES(alu_lanes, )
#ifdef VTA_X86_KERNELS
ALU_LANES(alu_lanes_avx2, __attribute__((target("avx2"))))
#endif

static void exec_alu(vta_sim_t *s, const insn_t *in) {
  const vta_field_t *uf = s->p.uop;
  const uint32_t lanes = s->p.batch * s->p.block_out;
  void (*lanes_fn)(uint32_t, int32_t *, const int32_t *, int32_t, uint32_t) = alu_lanes;
#ifdef VTA_X86_KERNELS
  if (s->kernel != K_PORTABLE) lanes_fn = alu_lanes_avx2;
#endif
  const uop_field_t fd = uop_field(uf[VTA_UOP_DST]), fs = uop_field(uf[VTA_UOP_SRC]);
  if (in->use_imm && in->dst_in == 1) {
    /* Each application is the same function of one element (op, imm), so the order in which the micro-ops and
     * the inner loop reach an element does not matter: the inner loop's contiguous rows go in one call. */
    for (uint32_t i = 0; i < in->iter_out; i++)
      for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
        const size_t d = (s->uop[k] >> fd.shift & fd.mask) + (size_t)i * in->dst_out;
        lanes_fn(in->alu_op, s->acc + d * lanes, NULL, in->imm, lanes * in->iter_in);
      }
    return;
  }
  if (!in->use_imm && in->uop_end - in->uop_bgn == 1 && in->dst_in == 1 && in->src_in <= 1) {
    /* One micro-op, contiguous destination rows (a bias or a residual added to a tile): with contiguous source
     * rows the inner loop is one span of elements taken in the same order as row by row (the lane loop keeps
     * sequential semantics where the operands overlap); with one source row, row by row without re-decoding. */
    const uint32_t u = s->uop[in->uop_bgn];
    for (uint32_t i = 0; i < in->iter_out; i++) {
      int32_t *dst = s->acc + ((u >> fd.shift & fd.mask) + (size_t)i * in->dst_out) * lanes;
      const int32_t *src = s->acc + ((u >> fs.shift & fs.mask) + (size_t)i * in->src_out) * lanes;
      if (in->src_in)
        lanes_fn(in->alu_op, dst, src, 0, lanes * in->iter_in);
      else
        for (uint32_t j = 0; j < in->iter_in; j++) lanes_fn(in->alu_op, dst + (size_t)j * lanes, src, 0, lanes);
    }
    return;
  }
  for (uint32_t i = 0; i < in->iter_out; i++) {
    for (uint32_t j = 0; j < in->iter_in; j++) {
      for (uint32_t k = in->uop_bgn; k < in->uop_end; k++) {
        const uint32_t u = s->uop[k];
        size_t d = (u >> fd.shift & fd.mask) + (size_t)i * in->dst_out + (size_t)j * in->dst_in;
        const int32_t *src = NULL;
        if (!in->use_imm) {
          size_t sr = (u >> fs.shift & fs.mask) + (size_t)i * in->src_out + (size_t)j * in->src_in;
          src = s->acc + sr * lanes;
        }
        lanes_fn(in->alu_op, s->acc + d * lanes, src, in->imm, lanes);
      }
    }
  }
}

/* Strict mode: refuse a STORE of a row whose output-buffer copy is not its accumulator narrowed (LOADed or reset
 * since its last GEMM/ALU), what VTA's functional simulator would store and the board would not. */
static int check_stale(const vta_sim_t *s, const insn_t *in, uint32_t idx, vta_stats_t *stats, char *err,
                       size_t errlen) {
  for (uint32_t y = 0; y < in->y_size; y++)
    for (uint32_t x = 0; x < in->x_size; x++) {
      const size_t r = (size_t)in->sram_base + (size_t)y * in->x_size + x;
      if (s->out_stale[r])
        INSN_FAIL(VTA_ERR_INSN, "stores accumulator row %llu, which a LOAD or a reset GEMM wrote after its last "
                  "GEMM/ALU: this hardware's STORE reads the output buffer, which only GEMM and ALU write, so it "
                  "would store an older result (run an ALU or GEMM on the row first)", (unsigned long long)r);
    }
  return VTA_OK;
}

static int execute(vta_sim_t *s, const insn_t *in, uint32_t idx, int compute, vta_stats_t *st, char *err,
                   size_t errlen) {
  switch (in->opcode) {
    case OP_LOAD:
      if (in->x_size == 0) return VTA_OK;
      count_load(s, in, st);
      if (compute || in->mem_type == MEM_UOP) exec_load(s, in);
      return VTA_OK;
    case OP_STORE:
      if (in->x_size == 0) return VTA_OK;
      if (compute && s->refuse_stale && s->n_stale) {
        int rc = check_stale(s, in, idx, st, err, errlen);
        if (rc) return rc;
      }
      st->out_store_nbytes += (uint64_t)in->x_size * in->y_size * s->out_elem;
      if (compute) exec_store(s, in);
      return VTA_OK;
    case OP_GEMM:
    case OP_ALU: {
      int rc = check_indices(s, in, idx, st, err, errlen);
      if (rc) return rc;
      if (in->opcode == OP_GEMM) {
        if (!in->reset) st->gemm_counter += iterations(in);
        if (compute && in->reset && s->out_mode && !(s->out_mode == 1 && reset_out_fast(s, in))) reset_out(s, in);
        if (compute) exec_gemm(s, in, 1);
      } else {
        st->alu_counter += iterations(in);
        if (compute) exec_alu(s, in);
      }
      if (compute && s->n_stale && !(in->opcode == OP_GEMM && in->reset)) out_follow(s, in);
      return VTA_OK;
    }
    default: return VTA_OK; /* FINISH */
  }
}

/* ------------------------------------------------------------------ scheduler (timing model) */

typedef struct queue_log {
  uint64_t *push_end;  /* end time of the n-th push */
  uint64_t *pop_start; /* start time of the n-th pop */
  uint32_t pushes, pops;
} queue_log_t;

typedef struct sched {
  uint32_t *order[NUM_MODULES]; /* instruction indices per module, in program order */
  uint32_t count[NUM_MODULES], next[NUM_MODULES];
  uint32_t *pos;                /* position of each instruction in its module's order */
  uint64_t *start, *dispatch;
  uint8_t *started;
  queue_log_t q[NUM_QUEUES];
  uint64_t free_at[NUM_MODULES];
  uint32_t fetched;             /* instructions dispatched so far */
  uint64_t fetch_time;
} sched_t;

static void sched_free(sched_t *S) {
  for (int m = 0; m < NUM_MODULES; m++) free(S->order[m]);
  for (int q = 0; q < NUM_QUEUES; q++) {
    free(S->q[q].push_end);
    free(S->q[q].pop_start);
  }
  free(S->pos);
  free(S->start);
  free(S->dispatch);
  free(S->started);
}

/* malloc of n elements of `size` bytes, or NULL where n * size does not fit in a size_t (on a 32-bit host a
 * count of up to 2^32 - 1 instructions times 8 bytes would wrap to a short buffer). */
static void *malloc_n(uint64_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  return malloc((size_t)(n * size));
}

static int sched_init(sched_t *S, const insn_t *in, uint32_t n) {
  memset(S, 0, sizeof *S);
  uint32_t pushes[NUM_QUEUES] = {0}, pops[NUM_QUEUES] = {0};
  for (uint32_t i = 0; i < n; i++) {
    S->count[in[i].module]++;
    for (int k = 0; k < 2; k++) {
      if (in[i].pop_q[k] != NO_QUEUE) pops[in[i].pop_q[k]]++;
      if (in[i].push_q[k] != NO_QUEUE) pushes[in[i].push_q[k]]++;
    }
  }
  int ok = 1;
  for (int m = 0; m < NUM_MODULES; m++)
    ok &= (S->order[m] = malloc_n((uint64_t)S->count[m] + 1, sizeof(uint32_t))) != NULL;
  for (int q = 0; q < NUM_QUEUES; q++) {
    ok &= (S->q[q].push_end = malloc_n((uint64_t)pushes[q] + 1, sizeof(uint64_t))) != NULL;
    ok &= (S->q[q].pop_start = malloc_n((uint64_t)pops[q] + 1, sizeof(uint64_t))) != NULL;
  }
  ok &= (S->pos = malloc_n(n, sizeof(uint32_t))) != NULL;
  ok &= (S->start = malloc_n(n, sizeof(uint64_t))) != NULL;
  ok &= (S->dispatch = malloc_n(n, sizeof(uint64_t))) != NULL;
  ok &= (S->started = calloc(n, 1)) != NULL;
  if (!ok) return 0;
  uint32_t fill[NUM_MODULES] = {0};
  for (uint32_t i = 0; i < n; i++) {
    uint32_t m = in[i].module;
    S->pos[i] = fill[m];
    S->order[m][fill[m]++] = i;
  }
  return 1;
}

/* Dispatch every instruction whose module queue has room (docs/simulator.md, "Fetch"). */
static void advance_fetch(sched_t *S, const insn_t *in, uint32_t n, uint64_t fetch_cost, uint32_t qdepth) {
  while (S->fetched < n) {
    uint32_t i = S->fetched;
    uint32_t m = in[i].module, k = S->pos[i];
    uint64_t room = 0;
    if (k >= qdepth) {
      uint32_t blocker = S->order[m][k - qdepth];
      if (!S->started[blocker]) return;
      room = S->start[blocker];
    }
    S->fetch_time = (S->fetch_time > room ? S->fetch_time : room) + fetch_cost;
    S->dispatch[i] = S->fetch_time;
    S->fetched++;
  }
}

/* Earliest start of instruction i and the binding stall cause; 0 if some constraint is not yet known. */
static int ready_time(const sched_t *S, const insn_t *in, uint32_t i, uint32_t tdepth, uint64_t *when, int *cause) {
  if (i >= S->fetched) return 0;
  uint64_t t = S->free_at[in->module];
  int c = -1;
  uint64_t best = 0;
  int best_cause = CAUSE_DISPATCH;
  /* candidates in tie-break priority order: pops, pushes, dispatch */
  uint64_t cand[5];
  int causes[5], nc = 0;
  for (int k = 0; k < 2; k++) {
    uint8_t q = in->pop_q[k];
    if (q == NO_QUEUE) continue;
    const queue_log_t *L = &S->q[q];
    if (L->pops >= L->pushes) return 0;
    cand[nc] = L->push_end[L->pops];
    causes[nc++] = q;
  }
  for (int k = 0; k < 2; k++) {
    uint8_t q = in->push_q[k];
    if (q == NO_QUEUE) continue;
    const queue_log_t *L = &S->q[q];
    if (L->pushes >= tdepth) {
      uint32_t need = L->pushes - tdepth; /* this pop must have happened */
      if (L->pops <= need) return 0;
      cand[nc] = L->pop_start[need];
      causes[nc++] = NUM_QUEUES + q;
    }
  }
  cand[nc] = S->dispatch[i];
  causes[nc++] = CAUSE_DISPATCH;
  for (int k = 0; k < nc; k++) {
    if (cand[k] > best) {
      best = cand[k];
      best_cause = causes[k];
    }
  }
  /* sort out ties by priority: the first candidate (in priority order) equal to the maximum */
  for (int k = 0; k < nc; k++) {
    if (cand[k] == best) {
      best_cause = causes[k];
      break;
    }
  }
  if (best > t) {
    t = best;
    c = best_cause;
  }
  *when = t;
  *cause = c;
  return 1;
}

static int report_deadlock(const sched_t *S, const insn_t *in, uint32_t tdepth, uint32_t qdepth,
                           vta_stats_t *stats, char *err, size_t errlen) {
  char msg[1024];
  size_t len = 0;
  int64_t first = -1;
  for (int m = 0; m < NUM_MODULES; m++) {
    if (S->next[m] >= S->count[m]) continue;
    uint32_t i = S->order[m][S->next[m]];
    if (first < 0 || (int64_t)i < first) first = i;
    char what[32], why[200];
    describe(&in[i], what, sizeof what);
    if (i >= S->fetched) {
      uint32_t j = S->fetched;
      snprintf(why, sizeof why, "is never dispatched: fetch is blocked at instruction %u because the %s queue is "
               "full (%u instructions waiting)", j, MODULE_NAMES[in[j].module], qdepth);
    } else {
      snprintf(why, sizeof why, "is blocked");
      for (int k = 0; k < 2; k++) {
        uint8_t q = in[i].pop_q[k];
        if (q != NO_QUEUE && S->q[q].pops >= S->q[q].pushes) {
          snprintf(why, sizeof why, "waits for a token on %s that is never pushed", QUEUE_NAMES[q]);
          break;
        }
        q = in[i].push_q[k];
        if (q != NO_QUEUE && S->q[q].pushes >= tdepth && S->q[q].pops <= S->q[q].pushes - tdepth) {
          snprintf(why, sizeof why, "waits for room on %s, full with %u tokens that are never popped",
                   QUEUE_NAMES[q], tdepth);
          break;
        }
      }
    }
    int w = snprintf(msg + len, sizeof msg - len, "%s%s at instruction %u (%s) %s", len ? "; " : "",
                     MODULE_NAMES[m], i, what, why);
    if (w > 0) len += (size_t)w < sizeof msg - len ? (size_t)w : sizeof msg - len - 1;
  }
  stats->error_index = first;
  return fail(err, errlen, VTA_ERR_DEADLOCK, "deadlock: %s", msg);
}

/* The refusal of an instruction whose host work would take the run past max_work. */
static int refuse_work(const insn_t *in, uint32_t idx, uint64_t work, uint64_t per,
                       uint64_t max_work, vta_stats_t *stats, char *err, size_t errlen) {
  char what[32], how[160];
  describe(in, what, sizeof what);
  if (in->opcode == OP_GEMM || in->opcode == OP_ALU)
    snprintf(how, sizeof how, "%llu micro-op iterations (iter_out=%u x iter_in=%u x %u micro-ops) x %llu %s",
             (unsigned long long)iterations(in), in->iter_out, in->iter_in, in->uop_end - in->uop_bgn,
             (unsigned long long)per, in->opcode == OP_GEMM && !in->reset ? "multiply-accumulates" : "lanes");
  else
    snprintf(how, sizeof how, "bytes moved");
  stats->error_index = idx;
  return fail(err, errlen, VTA_ERR_WORK, "instruction %u (%s): needs %s%llu units of host work (%s), and the run "
              "has done %llu of its budget max_work=%llu (raise max_work, or --max-work on the command line, to "
              "run bigger programs)", idx, what, work == UINT64_MAX ? "at least " : "", (unsigned long long)work,
              how, (unsigned long long)stats->work, (unsigned long long)max_work);
}

/* The shared DRAM bus (docs/simulator.md, "Timing model"). The modules' DMA engines share one port, as VTA's
 * masters share the Zynq's ACP port through an AXI interconnect: a LOAD or STORE in flight asks for its beats at
 * its own pace (beats / span per cycle), and when the asks add up to more than a beat per cycle the bus is shared
 * max-min fairly (round robin): the engines asking less than an equal share get what they ask, the others the
 * same share of what is left. Progress is counted in 2^-20 of a cycle of the engine's solo timeline, so an engine
 * alone on the bus takes exactly its solo duration. Transfers with a solo span of 2^40 cycles or more (beyond any
 * real program) are timed alone. */
#define BUS_SCALE 1048576u
#define BUS_MAX_SPAN (1ull << 40)

typedef struct flight {
  int active, on_bus;
  uint32_t idx;
  uint64_t start, end;   /* end: known once the transfer is done (or at once for an instruction off the bus) */
  uint64_t beats, span;  /* bus demand: beats over span solo cycles */
  uint64_t rem, rate;    /* solo cycles left x BUS_SCALE; progress per cycle x BUS_SCALE */
  uint64_t bus_end;      /* when the transfer ends at this rate (share_bus): rem falls by rate a cycle until then */
  int cause;
} flight_t;

/* Max-min fair shares of one beat per cycle among the engines on the bus (ties by module order). */
static void share_bus(flight_t *f, uint64_t now) {
  int order[NUM_MODULES], n = 0;
  for (int m = 0; m < NUM_MODULES; m++)
    if (f[m].active && f[m].on_bus) {
      int k = n++;
      double r = (double)f[m].beats / (double)f[m].span;
      while (k > 0 && (double)f[order[k - 1]].beats / (double)f[order[k - 1]].span > r) {
        order[k] = order[k - 1];
        k--;
      }
      order[k] = m;
    }
  double cap = 1.0, level = -1.0;
  for (int k = 0; k < n; k++) {
    flight_t *x = &f[order[k]];
    double r = (double)x->beats / (double)x->span;
    if (level < 0.0 && r <= cap / (double)(n - k)) {
      x->rate = BUS_SCALE;
      cap -= r;
      continue;
    }
    if (level < 0.0) level = cap / (double)(n - k);
    uint64_t rate = (uint64_t)(level / r * (double)BUS_SCALE);
    x->rate = rate ? rate : 1;
  }
  for (int k = 0; k < n; k++) f[order[k]].bus_end = now + ceil_div(f[order[k]].rem, f[order[k]].rate);
}

/* When the transfer of an engine on the bus ends at its current rate: now + ceil(rem / rate), which stays bus_end
 * while the rate holds (rem falls by rate a cycle), so the event loop divides only when the bus is re-shared. */
static uint64_t transfer_end(const flight_t *x, uint64_t now) { return x->bus_end > now ? x->bus_end : now; }

static void advance_bus(flight_t *f, uint64_t *now, uint64_t t) {
  if (t <= *now) return;
  for (int m = 0; m < NUM_MODULES; m++) {
    flight_t *x = &f[m];
    if (!x->active || !x->on_bus) continue;
    x->rem = t >= x->bus_end ? 0 : x->rem - (t - *now) * x->rate;   /* t - now >= ceil(rem / rate): done */
  }
  *now = t;
}

static int over_budget(const insn_t *cur, uint32_t idx, uint64_t end, uint64_t max_cycles, vta_stats_t *stats,
                       char *err, size_t errlen) {
  char what[32];
  describe(cur, what, sizeof what);
  stats->error_index = idx;
  return fail(err, errlen, VTA_ERR_BUDGET, "instruction %u (%s): would end at cycle %llu, past the budget of "
              "max_cycles=%llu (raise max_cycles, or --max-cycles on the command line, for longer programs)", idx,
              what, (unsigned long long)end, (unsigned long long)max_cycles);
}

int vta_sim_run(vta_sim_t *s, const uint8_t *insns, uint32_t count, int compute, uint64_t max_cycles,
                uint64_t max_work, vta_stats_t *stats, vta_trace_event_t *trace, char *err, size_t errlen) {
  const uint64_t run_t0 = s->profile ? now_ns() : 0; /* a run that fails before it starts is not profiled */
  if (!stats) return fail(err, errlen, VTA_ERR_ARG, "no stats buffer");
  memset(stats, 0, sizeof *stats);
  stats->error_index = -1;
  if (!insns || count == 0)
    return fail(err, errlen, VTA_ERR_INSN, "empty instruction stream (a stream ends with FINISH)");
  insn_t *in = malloc_n(count, sizeof(insn_t));
  if (!in) return fail(err, errlen, VTA_ERR_ARG, "out of host memory for %u instructions", count);
  int rc = decode_all(s, insns, count, in, stats, err, errlen);
  sched_t S;
  if (rc == VTA_OK && !sched_init(&S, in, count)) {
    sched_free(&S);
    free(in);
    return fail(err, errlen, VTA_ERR_ARG, "out of host memory for the scheduler");
  }
  if (rc != VTA_OK) {
    free(in);
    return rc;
  }
  if (compute && s->pool && s->pool->pid == getpid() && s->pool->nstarted)
    for (uint32_t i = 0; i < count; i++)
      if (in[i].opcode == OP_GEMM && splits(s, &in[i])) {
        pool_poke(s->pool);
        break;
      }
  const uint64_t fetch_cost = ceil_div(VTA_INSN_BYTES, s->p.bus_bytes);
  const uint32_t tdepth = s->p.token_queue_depth, qdepth = s->p.insn_queue_depth;
  S.fetch_time = s->p.dram_latency;
  flight_t fl[NUM_MODULES];
  memset(fl, 0, sizeof fl);
  uint64_t now = 0;
  uint32_t done = 0;
  /* Events in time order: an instruction starts when its module is free and its constraints are known (the
   * earliest start first, ties load < compute < store); a transfer ends and re-shares the bus; an instruction
   * ends, freeing its module and pushing its tokens. At equal times ends come before starts. */
  while (done < count) {
    advance_fetch(&S, in, count, fetch_cost, qdepth);
    int pick = -1, pick_cause = -1;
    uint64_t pick_t = 0;
    for (int m = 0; m < NUM_MODULES; m++) {
      if (fl[m].active || S.next[m] >= S.count[m]) continue;
      uint32_t i = S.order[m][S.next[m]];
      uint64_t t;
      int cause;
      if (!ready_time(&S, &in[i], i, tdepth, &t, &cause)) continue;
      if (pick < 0 || t < pick_t) {
        pick = m;
        pick_t = t;
        pick_cause = cause;
      }
    }
    int ev = -1;
    uint64_t ev_t = 0;
    for (int m = 0; m < NUM_MODULES; m++) {
      if (!fl[m].active) continue;
      uint64_t t = fl[m].on_bus ? transfer_end(&fl[m], now) : fl[m].end;
      if (ev < 0 || t < ev_t) {
        ev = m;
        ev_t = t;
      }
    }
    if (pick < 0 && ev < 0) {
      rc = report_deadlock(&S, in, tdepth, qdepth, stats, err, errlen);
      break;
    }
    if (ev >= 0 && (pick < 0 || ev_t <= pick_t)) {
      flight_t *x = &fl[ev];
      advance_bus(fl, &now, ev_t);
      if (x->on_bus) { /* the last beat is out: the DRAM latency follows, off the bus */
        x->on_bus = 0;
        x->end = ev_t + s->p.dram_latency;
        share_bus(fl, now);
        continue;
      }
      const insn_t *cur = &in[x->idx];
      uint64_t end = x->end;
      if (end > max_cycles) {
        rc = over_budget(cur, x->idx, end, max_cycles, stats, err, errlen);
        break;
      }
      for (int k = 0; k < 2; k++)
        if (cur->push_q[k] != NO_QUEUE) {
          queue_log_t *L = &S.q[cur->push_q[k]];
          L->push_end[L->pushes++] = end;
        }
      S.free_at[ev] = end;
      stats->busy[ev] += end - x->start;
      if (end > stats->cycles) stats->cycles = end;
      if (cur->opcode == OP_FINISH) stats->finish_cycle = end;
      if (trace) trace[x->idx] = (vta_trace_event_t){x->start, end, (uint32_t)ev};
      x->active = 0;
      done++;
      continue;
    }
    uint32_t idx = S.order[pick][S.next[pick]];
    const insn_t *cur = &in[idx];
    uint64_t solo_end = pick_t + duration(s, cur);
    if (solo_end > max_cycles) {
      rc = over_budget(cur, idx, solo_end, max_cycles, stats, err, errlen);
      break;
    }
    uint64_t per, work = host_work(s, cur, &per);
    if (work > max_work - stats->work) { /* stats->work <= max_work: no wrap-around */
      rc = refuse_work(cur, idx, work, per, max_work, stats, err, errlen);
      break;
    }
    if (s->profile) { /* the instruction's class gets its time, less the weight layouts it built */
      const uint64_t t0 = now_ns(), layout0 = s->prof_ns[PROF_LAYOUT];
      rc = execute(s, cur, idx, compute, stats, err, errlen);
      const int cls = cur->opcode == OP_LOAD ? PROF_LOAD : cur->opcode == OP_STORE ? PROF_STORE
                      : cur->opcode == OP_GEMM ? PROF_GEMM : cur->opcode == OP_ALU ? PROF_ALU : -1;
      if (cls >= 0) s->prof_ns[cls] += now_ns() - t0 - (s->prof_ns[PROF_LAYOUT] - layout0);
    } else {
      rc = execute(s, cur, idx, compute, stats, err, errlen);
    }
    if (rc) break;
    stats->work += work;
    if (pick_cause >= 0) stats->stalls[pick][pick_cause] += pick_t - S.free_at[pick];
    for (int k = 0; k < 2; k++)
      if (cur->pop_q[k] != NO_QUEUE) {
        queue_log_t *L = &S.q[cur->pop_q[k]];
        L->pop_start[L->pops++] = pick_t;
      }
    S.start[idx] = pick_t;
    S.started[idx] = 1;
    S.next[pick]++;
    stats->insns[pick]++;
    advance_bus(fl, &now, pick_t);
    flight_t *x = &fl[pick];
    *x = (flight_t){.active = 1, .idx = idx, .start = pick_t, .end = solo_end};
    if (bus_demand(s, cur, &x->beats, &x->span) && x->beats && x->span < BUS_MAX_SPAN) {
      x->on_bus = 1;
      x->rem = x->span * BUS_SCALE;
      share_bus(fl, now);
    }
  }
  sched_free(&S);
  free(in);
  if (s->profile) s->prof_ns[PROF_RUN] += now_ns() - run_t0;
  return rc;
}

/* ------------------------------------------------------------------ batches (vta_sim.h, vta_sim_run_batch) */

int vta_sim_run_batch(vta_sim_t *s, const vta_batch_item_t *items, uint32_t n, int compute, uint64_t max_cycles,
                      uint64_t max_work, vta_stats_t *stats, uint32_t *failed, char *err, size_t errlen) {
  if (!failed) return fail(err, errlen, VTA_ERR_ARG, "no buffer for the failed item's index");
  *failed = n;
  if (n && (!items || !stats)) return fail(err, errlen, VTA_ERR_ARG, "%u items without %s", n, items ? "stats" : "items");
  for (uint32_t i = 0; i < n; i++) {
    memset(&stats[i], 0, sizeof stats[i]);
    stats[i].error_index = -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    const vta_batch_item_t *it = &items[i];
    int rc = VTA_OK;
    if (it->copy_bytes && !it->copy_src)
      rc = fail(err, errlen, VTA_ERR_ARG, "item %u: %llu bytes to copy from NULL", i, (unsigned long long)it->copy_bytes);
    if (rc == VTA_OK && it->copy_bytes) rc = vta_sim_write(s, it->copy_addr, it->copy_src, it->copy_bytes, err, errlen);
    if (rc == VTA_OK && it->count)
      rc = vta_sim_run(s, it->insns, it->count, compute, max_cycles, max_work, &stats[i], NULL, err, errlen);
    if (rc != VTA_OK) {
      *failed = i;
      return rc;
    }
  }
  return VTA_OK;
}
