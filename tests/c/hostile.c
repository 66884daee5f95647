/* Hostile driver for the C simulator: random and malformed programs plus API misuse.
 *
 *   hostile PARAMS_FILE ITERATIONS SEED
 *
 * PARAMS_FILE holds the 118 uint32 of vta_params_t (`python -m simulator.params PRESET`). Built together
 * with simulator/csrc/vta_sim.c, normally under AddressSanitizer and UBSan (tests/test_c_sanitizers.py).
 * Every call must return VTA_OK or an error code with a non-empty NUL-terminated message, outcomes that can
 * be predicted (DRAM mapping, SRAM ranges, argument checks) must match the prediction, and after any error
 * the simulator must still run a known-good program correctly. Exits nonzero on any violated expectation.
 * Every simulator runs with an output-buffer mode (vta_sim_set_out_buffer: 0 mirror as VTA's fsim, 1 hls, 2 chisel;
 * the contexts start with all three and switch now and then), and a probe checks each mode's semantics exactly,
 * strict mode's refusals included (out_buffer_probe).
 * Prints what happened and a digest of what the runs computed: every build (another kernel path, a 32-bit ARM
 * build under qemu: tests/test_armv7.py) must print the same for the same arguments.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vta_sim.h"

#define NPARAMS 118
#define ERRLEN 512
#define MAX_INSNS 40
#define MAX_REGIONS 12 /* per simulator: the known-good region plus the random pool */
#define POOL_MAX 8
#define NCTX 4         /* the preset itself plus three shrunk variants */
#define PAGE 4096u
#define GOOD_BASE 0x100000u
#define GOOD_SIZE 0x4000u
#define TOP48 ((uint64_t)1 << 48)
#define NO_WORK_LIMIT UINT64_MAX /* max_work that never binds */

typedef char params_are_118_uint32[(sizeof(vta_params_t) == NPARAMS * sizeof(uint32_t)) ? 1 : -1];

enum { OP_LOAD = 0, OP_STORE = 1, OP_GEMM = 2, OP_FINISH = 3, OP_ALU = 4 };
enum { MEM_UOP = 0, MEM_WGT = 1, MEM_INP = 2, MEM_ACC = 3, MEM_OUT = 4, MEM_ACC_8BIT = 5 };
enum { ALU_ADD = 2 };
enum { OUT_MIRROR = 0, OUT_HLS = 1, OUT_CHISEL = 2, OUT_MODES = 3 }; /* vta_sim_set_out_buffer's modes */

/* ------------------------------------------------------------------ checks */

static unsigned long long g_pass, g_fail;
static unsigned long g_iter; /* current iteration, for failure messages */
static const char *g_phase = "setup";

#define EXPECT(cond, ...)                                                                             \
  do {                                                                                                \
    if (cond) {                                                                                       \
      g_pass++;                                                                                       \
    } else {                                                                                          \
      g_fail++;                                                                                       \
      if (g_fail <= 50) {                                                                             \
        fprintf(stderr, "FAIL %s:%d [%s, iteration %lu]: ", __FILE__, __LINE__, g_phase, g_iter);     \
        fprintf(stderr, __VA_ARGS__);                                                                 \
        fputc('\n', stderr);                                                                          \
      }                                                                                               \
    }                                                                                                 \
  } while (0)

#define NCODES 7 /* VTA_OK .. VTA_ERR_WORK */
static const char *const RC_NAMES[NCODES] = {"ok", "insn", "mem", "deadlock", "budget", "arg", "work"};
static unsigned long long prog_rc[NCODES + 1], api_rc[NCODES + 1]; /* index NCODES: out-of-range codes */
static unsigned long long clean_rc[NCODES + 1], executed, gemm_ops, alu_ops; /* how deep the programs get */

static int rc_index(int rc) { return rc >= 0 && rc < NCODES ? rc : NCODES; }
static const char *rc_name(int rc) { return rc >= 0 && rc < NCODES ? RC_NAMES[rc] : "invalid"; }

/* ------------------------------------------------------------------ digest of what the runs computed */

/* Each run's status and stats, and every DIGEST_EVERY iterations (and at the end) a simulator's SRAMs and mapped
 * DRAM, folded 64 bits at a time into one word (each step is a bijection of the digest, so one differing word
 * always shows). Words are read little-endian, as the simulator's DRAM is. */
#define DIGEST_EVERY 32
static uint64_t g_digest = UINT64_C(0xcbf29ce484222325);

static void digest_u64(uint64_t v) {
  g_digest = (g_digest ^ v) * UINT64_C(0x100000001b3);
  g_digest ^= g_digest >> 29;
}

static void digest_bytes(const void *p, size_t n) {
  const uint8_t *b = p;
  digest_u64(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    for (size_t k = 0; k < 8 && i + k < n; k++) w |= (uint64_t)b[i + k] << (8 * k);
    digest_u64(w);
  }
}

/* A run's outcome: the status and every counter (vta_stats_t is all 64-bit fields: one layout on every ABI). */
static void digest_run(int rc, const vta_stats_t *st) {
  digest_u64((uint64_t)rc);
  digest_bytes(st, sizeof *st);
}

/* ------------------------------------------------------------------ PRNG (xorshift64*) */

static uint64_t g_rng;

static uint64_t next64(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * UINT64_C(0x2545F4914F6CDD1D);
}

/* Uniform in [0, n); n == 0 gives 0. */
static uint64_t rnd(uint64_t n) { return n ? next64() % n : 0; }
static int chance(unsigned pct) { return rnd(100) < pct; }

static uint64_t mask_of(uint32_t width) { return width >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << width) - 1; }

/* A value for a field of `width` bits, biased toward small numbers and the extremes. */
static uint64_t biased(uint32_t width) {
  uint64_t m = mask_of(width);
  switch (rnd(10)) {
    case 0: case 1: case 2: case 3: return rnd(4) & m;
    case 4: case 5: return rnd(17) & m;
    case 6: return m;
    case 7: return (m - rnd(3)) & m;
    default: return next64() & m;
  }
}

/* ------------------------------------------------------------------ instruction encoding */

static void put(uint64_t w[2], vta_field_t f, uint64_t v) {
  uint64_t m = mask_of(f.width);
  uint32_t word = f.offset / 64, sh = f.offset % 64;
  w[word] = (w[word] & ~(m << sh)) | ((v & m) << sh);
}

static void emit(uint8_t *dst, const uint64_t w[2]) { memcpy(dst, w, 16); } /* the simulator is little-endian */

/* ------------------------------------------------------------------ one simulator with a mirror of its map */

typedef struct region {
  uint64_t base, size;
} region_t;

typedef struct ctx {
  const char *name;
  vta_params_t p;
  vta_sim_t *sim;
  region_t reg[MAX_REGIONS]; /* reg[0] is the known-good region, never unmapped */
  int nreg;
  uint32_t inp_elem, wgt_elem, acc_elem, out_elem;
  int out_mode; /* the output-buffer mode it runs with (never strict: random programs STORE whatever rows) */
} ctx_t;

static char g_err[ERRLEN];

static void clear_err(void) { memset(g_err, 0x5a, sizeof g_err); }

/* The message after an error: NUL-terminated inside the buffer and non-empty. */
static void check_message(int rc, const char *what) {
  EXPECT(rc >= 0 && rc < NCODES, "%s returned unknown status %d", what, rc);
  if (rc != VTA_OK) {
    EXPECT(memchr(g_err, 0, sizeof g_err) != NULL, "%s (%s): message is not NUL-terminated", what, rc_name(rc));
    EXPECT(g_err[0] != 0 && g_err[0] != 0x5a, "%s (%s): empty or unwritten message", what, rc_name(rc));
  }
}

static int g_pending; /* an error happened since the last known-good check */

static void count_api(int rc) {
  api_rc[rc_index(rc)]++;
  if (rc != VTA_OK) g_pending = 1;
}

static uint32_t dram_elem(const ctx_t *c, uint32_t mem) {
  switch (mem) {
    case MEM_UOP: return 4;
    case MEM_WGT: return c->wgt_elem;
    case MEM_INP: return c->inp_elem;
    case MEM_ACC: return c->acc_elem;
    default: return c->out_elem;
  }
}

static uint32_t sram_depth(const ctx_t *c, uint32_t mem) {
  switch (mem) {
    case MEM_UOP: return c->p.uop_depth;
    case MEM_WGT: return c->p.wgt_depth;
    case MEM_INP: return c->p.inp_depth;
    default: return c->p.acc_depth;
  }
}

static uint32_t sram_elem(const ctx_t *c, uint32_t mem) { return mem == MEM_ACC_8BIT ? c->acc_elem : dram_elem(c, mem); }

/* Mirror predictions: is [addr, addr+n) inside one mapped region (the simulator's rule, n == 0 included)? */
static int mirror_inside(const ctx_t *c, uint64_t addr, uint64_t n) {
  for (int i = 0; i < c->nreg; i++) {
    const region_t *r = &c->reg[i];
    if (addr >= r->base && addr - r->base <= r->size && n <= r->size - (addr - r->base)) return 1;
  }
  return 0;
}

static int mirror_overlaps(const ctx_t *c, uint64_t addr, uint64_t size) {
  for (int i = 0; i < c->nreg; i++) {
    const region_t *r = &c->reg[i];
    if (addr < r->base + r->size && r->base < addr + size) return 1;
  }
  return 0;
}

static int mirror_find_base(const ctx_t *c, uint64_t addr) {
  for (int i = 0; i < c->nreg; i++)
    if (c->reg[i].base == addr) return i;
  return -1;
}

/* Valid request for map (what the simulator accepts) with the mirror's overlap rule. */
static int predict_map(const ctx_t *c, uint64_t addr, uint64_t size) {
  if (size == 0 || size > ((uint64_t)1 << 40) || addr > TOP48 - size) return VTA_ERR_MEM;
  return mirror_overlaps(c, addr, size) ? VTA_ERR_MEM : VTA_OK;
}

static int do_map(ctx_t *c, uint64_t addr, uint64_t size) {
  int expect = predict_map(c, addr, size);
  clear_err();
  int rc = vta_sim_map(c->sim, addr, size, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_map");
  EXPECT(rc == expect, "%s: map(0x%llx, %llu) returned %s, expected %s (%s)", c->name, (unsigned long long)addr,
         (unsigned long long)size, rc_name(rc), rc_name(expect), rc ? g_err : "");
  if (rc == VTA_OK && c->nreg < MAX_REGIONS) c->reg[c->nreg++] = (region_t){addr, size};
  return rc;
}

static int do_unmap(ctx_t *c, uint64_t addr) {
  int i = mirror_find_base(c, addr);
  int expect = i >= 0 ? VTA_OK : VTA_ERR_MEM;
  clear_err();
  int rc = vta_sim_unmap(c->sim, addr, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_unmap");
  EXPECT(rc == expect, "%s: unmap(0x%llx) returned %s, expected %s", c->name, (unsigned long long)addr,
         rc_name(rc), rc_name(expect));
  if (rc == VTA_OK && i >= 0) c->reg[i] = c->reg[--c->nreg];
  return rc;
}

static int do_write(ctx_t *c, uint64_t addr, const uint8_t *src, uint64_t n) {
  int expect = mirror_inside(c, addr, n) ? VTA_OK : VTA_ERR_MEM;
  clear_err();
  int rc = vta_sim_write(c->sim, addr, src, n, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_write");
  EXPECT(rc == expect, "%s: write(0x%llx, %llu) returned %s, expected %s", c->name, (unsigned long long)addr,
         (unsigned long long)n, rc_name(rc), rc_name(expect));
  return rc;
}

static int do_read(ctx_t *c, uint64_t addr, uint8_t *dst, uint64_t n) {
  int expect = mirror_inside(c, addr, n) ? VTA_OK : VTA_ERR_MEM;
  clear_err();
  int rc = vta_sim_read(c->sim, addr, dst, n, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_read");
  EXPECT(rc == expect, "%s: read(0x%llx, %llu) returned %s, expected %s", c->name, (unsigned long long)addr,
         (unsigned long long)n, rc_name(rc), rc_name(expect));
  return rc;
}

static int do_sram(ctx_t *c, uint32_t mem, uint32_t index, uint32_t count, uint8_t *buf, int write) {
  /* 4 (OUT, the output buffer) is read only */
  int expect = mem > MEM_OUT || (mem == MEM_OUT && write) || (uint64_t)index + count > sram_depth(c, mem) ? VTA_ERR_ARG
                                                                                                         : VTA_OK;
  clear_err();
  int rc = vta_sim_sram(c->sim, mem, index, count, buf, write, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_sram");
  EXPECT(rc == expect, "%s: sram(mem %u, index %u, count %u, write %d) returned %s, expected %s", c->name, mem,
         index, count, write, rc_name(rc), rc_name(expect));
  return rc;
}

/* Random bytes, small bytes, or small encoded micro-ops (so LOAD UOP from DRAM often passes the checks). */
static void fill_random(const ctx_t *c, uint8_t *buf, size_t n) {
  switch (rnd(3)) {
    case 0:
      for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)next64();
      break;
    case 1:
      for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rnd(4);
      break;
    default:
      for (size_t i = 0; i + 4 <= n; i += 4) {
        uint64_t w[2] = {0, 0};
        for (int f = 0; f < VTA_UOP_NFIELDS; f++) put(w, c->p.uop[f], rnd(8));
        uint32_t u = (uint32_t)w[0];
        memcpy(buf + i, &u, 4);
      }
      for (size_t i = n & ~(size_t)3; i < n; i++) buf[i] = (uint8_t)next64();
  }
}

/* ------------------------------------------------------------------ the known-good program */

static void encode_mem(const ctx_t *c, uint64_t w[2], uint32_t opcode, uint32_t mem, uint32_t sram_base,
                       uint64_t dram_base, uint32_t y, uint32_t x, uint32_t stride, int pop_prev, int push_next) {
  const vta_field_t *f = c->p.mem;
  w[0] = w[1] = 0;
  put(w, f[VTA_MEM_OPCODE], opcode);
  put(w, f[VTA_MEM_POP_PREV], (uint64_t)pop_prev);
  put(w, f[VTA_MEM_PUSH_NEXT], (uint64_t)push_next);
  put(w, f[VTA_MEM_MEMORY_TYPE], mem);
  put(w, f[VTA_MEM_SRAM_BASE], sram_base);
  put(w, f[VTA_MEM_DRAM_BASE], dram_base);
  put(w, f[VTA_MEM_Y_SIZE], y);
  put(w, f[VTA_MEM_X_SIZE], x);
  put(w, f[VTA_MEM_X_STRIDE], stride);
}

static uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

/* LOAD ACC (2 elements) -> STORE OUT -> FINISH through the known-good region; checks the stored bytes by hand: the
 * low byte of each loaded lane in mode mirror, and in modes hls and chisel what the output buffer held before (a LOAD
 * into acc leaves it as it was), read through SRAM id 4; the accumulator rows hold the loaded lanes in every mode. */
static void known_good(ctx_t *c, const char *after) {
  const char *saved = g_phase;
  g_phase = "known-good";
  const uint32_t ea = c->acc_elem, eo = c->out_elem;
  const uint64_t in_addr = round_up(GOOD_BASE, ea), out_addr = round_up(GOOD_BASE + GOOD_SIZE / 2, eo);
  uint8_t in[2 * 4096], out[4 * 1024], expect[4 * 1024];
  /* two elements of random int32 lanes; the output window has one canary element on each side */
  for (uint32_t i = 0; i < 2 * ea; i++) in[i] = (uint8_t)next64();
  memset(out, 0xcc, 4 * eo);
  memcpy(expect, out, 4 * eo);
  for (uint32_t l = 0; l < 2 * eo; l++) expect[eo + l] = in[4 * l]; /* low byte of each little-endian lane */
  uint32_t sb = (uint32_t)rnd(c->p.acc_depth - 1);
  if (do_write(c, in_addr, in, 2 * ea) || do_write(c, out_addr - eo, out, 4 * eo)) {
    g_phase = saved;
    return;
  }
  if (c->out_mode != OUT_MIRROR && do_sram(c, MEM_OUT, sb, 2, expect + eo, 0) != VTA_OK) {
    g_phase = saved;
    return;
  }
  uint8_t prog[3 * 16];
  uint64_t w[2];
  int split = (int)rnd(2); /* 1 row of 2 elements, or 2 rows of 1 */
  encode_mem(c, w, OP_LOAD, MEM_ACC, sb, in_addr / ea, split ? 2 : 1, split ? 1 : 2, split ? 1 : 2, 0, 1);
  emit(prog, w);
  encode_mem(c, w, OP_STORE, MEM_OUT, sb, out_addr / eo, split ? 2 : 1, split ? 1 : 2, split ? 1 : 2, 1, 0);
  emit(prog + 16, w);
  w[0] = w[1] = 0;
  put(w, c->p.mem[VTA_MEM_OPCODE], OP_FINISH);
  emit(prog + 32, w);
  vta_stats_t st;
  clear_err();
  int rc = vta_sim_run(c->sim, prog, 3, 1, 1000000, NO_WORK_LIMIT, &st, NULL, g_err, sizeof g_err);
  count_api(rc);
  digest_run(rc, &st);
  EXPECT(rc == VTA_OK, "%s: known-good program after %s failed: %s: %s", c->name, after, rc_name(rc), g_err);
  if (rc == VTA_OK) {
    EXPECT(st.insns[0] == 0 && st.insns[1] == 2 && st.insns[2] == 1 && st.error_index == -1,
           "%s: known-good program: wrong instruction counts", c->name);
    EXPECT(st.acc_load_nbytes == 2ull * ea && st.out_store_nbytes == 2ull * eo,
           "%s: known-good program: wrong byte counters", c->name);
    EXPECT(st.finish_cycle > 0 && st.finish_cycle <= st.cycles, "%s: known-good program: bad cycle counts", c->name);
    EXPECT(st.work == 2ull * ea + 2ull * eo, "%s: known-good program: host work %llu, expected %llu", c->name,
           (unsigned long long)st.work, 2ull * ea + 2ull * eo);
  }
  uint8_t got[4 * 1024];
  if (do_read(c, out_addr - eo, got, 4 * eo) == VTA_OK)
    EXPECT(memcmp(got, expect, 4 * eo) == 0, "%s: known-good program after %s stored wrong bytes (output mode %d)",
           c->name, after, c->out_mode);
  uint8_t acc[2 * 4096];
  if (do_sram(c, MEM_ACC, sb, 2, acc, 0) == VTA_OK)
    EXPECT(memcmp(acc, in, 2 * ea) == 0, "%s: known-good program after %s: the accumulator rows are not the loaded "
           "ones", c->name, after);
  g_phase = saved;
  g_pending = 0;
}

static unsigned long long g_known_good;

/* After any error: the simulator must still run the known-good program correctly. */
static void settle(ctx_t *c, const char *after) {
  if (!g_pending) return;
  g_known_good++;
  known_good(c, after);
}

/* ------------------------------------------------------------------ random DRAM pool */

static void pool_map_random(ctx_t *c) {
  if (c->nreg >= 1 + POOL_MAX) {
    int victim = 1 + (int)rnd((uint64_t)c->nreg - 1);
    do_unmap(c, c->reg[victim].base);
  }
  uint64_t size, addr;
  switch (rnd(10)) {
    case 0: case 1: size = 1 + rnd(64); break;                 /* tiny */
    case 2: size = 65536 + rnd(3) * PAGE; break;               /* larger */
    default: size = PAGE * (1 + rnd(4)) - (chance(30) ? rnd(PAGE) : 0);
  }
  switch (rnd(20)) {
    case 0: addr = (TOP48 - size) & ~(uint64_t)(PAGE - 1); break;  /* top of the 48-bit space */
    case 1: addr = TOP48 - size; break;                              /* flush with the top */
    case 2: addr = (1 + rnd(4096)) * PAGE + 1 + rnd(63); break;      /* unaligned */
    default: addr = (1 + rnd(4096)) * PAGE;                          /* low pages, reachable by instructions */
  }
  if (do_map(c, addr, size) == VTA_OK) {
    uint8_t *buf = malloc((size_t)size);
    if (!buf) {
      fprintf(stderr, "hostile: out of memory\n");
      exit(2);
    }
    fill_random(c, buf, (size_t)size);
    do_write(c, addr, buf, size);
    free(buf);
  }
}

/* A DRAM element index for `mem`, usually inside some mapped region. With `extent` > 0 the index leaves room
 * for `extent` whole elements when some region has it (clean programs), else it may sit near or past the end. */
static uint64_t pick_dram_base(const ctx_t *c, uint32_t mem, uint32_t width, uint64_t extent) {
  uint32_t e = dram_elem(c, mem);
  if (c->nreg && (extent || chance(85))) {
    for (int tries = 0; tries < (extent ? 4 : 1); tries++) {
      const region_t *r = &c->reg[tries == 3 ? 0 : rnd((uint64_t)c->nreg)];
      uint64_t first = round_up(r->base, e);
      if (first >= r->base + r->size) continue;
      uint64_t n = (r->base + r->size - first) / e; /* whole elements */
      if (extent && first / e + n - 1 > mask_of(width)) continue; /* not addressable by the field */
      if (extent) {
        if (n < extent) continue;
        return first / e + (chance(70) ? rnd(n - extent + 1) : n - extent);
      }
      uint64_t k = n ? (chance(70) ? rnd(n) : n - 1 - rnd(n < 3 ? n : 3)) : 0;
      if (chance(10)) k = n; /* just past the end */
      return first / e + k;
    }
  }
  return biased(width);
}

/* ------------------------------------------------------------------ random programs */

static int g_clean; /* the program being built aims to pass validation (hostile values are rare) */

static uint32_t small_or(uint32_t limit, uint32_t width) {
  if (!g_clean && chance(5)) return (uint32_t)biased(width);
  return (uint32_t)rnd(limit);
}

static void random_flags(uint64_t w[2], const vta_field_t *f, int mode, int module) {
  /* mode 0: none; 1: any flag; 2: only flags valid on the module */
  uint32_t pp = 0, pn = 0, up = 0, un = 0;
  if (mode == 1) {
    pp = chance(15); pn = chance(15); up = chance(15); un = chance(15);
  } else if (mode == 2) {
    if (module != 0) { pp = chance(30); up = chance(30); } /* compute and store have a previous stage */
    if (module != 2) { pn = chance(30); un = chance(30); } /* load and compute have a next stage */
  }
  put(w, f[VTA_MEM_POP_PREV], pp);
  put(w, f[VTA_MEM_POP_NEXT], pn);
  put(w, f[VTA_MEM_PUSH_PREV], up);
  put(w, f[VTA_MEM_PUSH_NEXT], un);
}

static void gen_mem(const ctx_t *c, uint64_t w[2], uint32_t opcode, int flag_mode) {
  const vta_field_t *f = c->p.mem;
  for (int k = 0; k < VTA_MEM_NFIELDS; k++) put(w, f[k], biased(f[k].width)); /* any field, then the real ones */
  static const uint32_t load_types[] = {MEM_UOP, MEM_WGT, MEM_INP, MEM_ACC, MEM_ACC_8BIT};
  int sane = g_clean || chance(92);
  uint32_t mem = opcode == OP_STORE ? (sane ? MEM_OUT : (uint32_t)rnd(8)) : (sane ? load_types[rnd(5)] : (uint32_t)rnd(8));
  put(w, f[VTA_MEM_OPCODE], opcode);
  put(w, f[VTA_MEM_MEMORY_TYPE], mem);
  uint32_t depth = sram_depth(c, mem);
  uint32_t x = chance(g_clean ? 3 : 8) ? 0 : 1 + (uint32_t)rnd(4), y = !g_clean && chance(3) ? 0 : 1 + (uint32_t)rnd(3);
  uint32_t stride = chance(80) ? x + (uint32_t)rnd(3) : (uint32_t)rnd((uint64_t)x + 1);
  uint32_t pads[4] = {0, 0, 0, 0};
  if (opcode == OP_LOAD ? chance(35) : !g_clean && chance(5))
    for (int k = 0; k < 4; k++) pads[k] = !g_clean && chance(3) ? (uint32_t)biased(4) : (uint32_t)rnd(3);
  uint64_t need = (uint64_t)(pads[0] + y + pads[1]) * (pads[2] + x + pads[3]);
  uint32_t sram = chance(75) ? (uint32_t)rnd(depth < 16 ? depth : 16) : (uint32_t)rnd((uint64_t)depth + 4);
  if (chance(15) && need <= (uint64_t)depth + 1) sram = (uint32_t)(depth + 1 - need - rnd(depth + 1 - need < 3 ? depth + 2 - need : 3));
  uint64_t extent = 0;
  if (g_clean) { /* make the ranges fit: SRAM first, then DRAM */
    if (need > depth) {
      x = y = stride = 1;
      pads[0] = pads[1] = pads[2] = pads[3] = 0;
      need = 1;
    }
    sram = chance(75) ? (uint32_t)rnd(depth - need + 1 < 16 ? depth - need + 1 : 16) : (uint32_t)rnd(depth - need + 1);
    if (chance(10)) sram = (uint32_t)(depth - need); /* flush with the end of the buffer */
    if (((uint64_t)(y - 1) * stride + x) * dram_elem(c, mem) > GOOD_SIZE / 2) { y = 1; stride = x; }
    extent = x ? (uint64_t)(y - 1) * stride + x : 0;
  } else {
    if (chance(4)) x = (uint32_t)biased(f[VTA_MEM_X_SIZE].width);
    if (chance(3)) y = (uint32_t)biased(f[VTA_MEM_Y_SIZE].width);
    if (chance(3)) stride = (uint32_t)biased(f[VTA_MEM_X_STRIDE].width);
    if (chance(3)) sram = (uint32_t)biased(f[VTA_MEM_SRAM_BASE].width);
  }
  put(w, f[VTA_MEM_SRAM_BASE], sram);
  put(w, f[VTA_MEM_DRAM_BASE], pick_dram_base(c, mem, f[VTA_MEM_DRAM_BASE].width, extent));
  put(w, f[VTA_MEM_Y_SIZE], y);
  put(w, f[VTA_MEM_X_SIZE], x);
  put(w, f[VTA_MEM_X_STRIDE], stride);
  put(w, f[VTA_MEM_Y_PAD_0], pads[0]);
  put(w, f[VTA_MEM_Y_PAD_1], pads[1]);
  put(w, f[VTA_MEM_X_PAD_0], pads[2]);
  put(w, f[VTA_MEM_X_PAD_1], pads[3]);
  int module = opcode == OP_STORE ? 2 : (mem == MEM_INP || mem == MEM_WGT) ? 0 : 1;
  random_flags(w, f, flag_mode, module);
}

static void gen_loop(const ctx_t *c, uint64_t w[2], uint32_t opcode, int flag_mode) {
  const vta_field_t *f = opcode == OP_GEMM ? c->p.gemm : c->p.alu;
  int n = opcode == OP_GEMM ? VTA_GEMM_NFIELDS : VTA_ALU_NFIELDS;
  for (int k = 0; k < n; k++) put(w, f[k], biased(f[k].width));
  put(w, f[VTA_LOOP_OPCODE], opcode);
  put(w, f[VTA_LOOP_RESET], chance(25));
  uint32_t bgn = small_or(8, f[VTA_LOOP_UOP_BGN].width);
  uint32_t end = g_clean || chance(90) ? bgn + (uint32_t)rnd(5) : small_or(12, f[VTA_LOOP_UOP_END].width);
  if (chance(8)) { /* the end of the micro-op buffer, or one past it */
    end = c->p.uop_depth + (g_clean ? 0 : (uint32_t)rnd(2));
    bgn = end - (uint32_t)rnd(end < 4 ? (uint64_t)end + 1 : 4);
  }
  if (g_clean && end > c->p.uop_depth) {
    end = c->p.uop_depth;
    bgn = (uint32_t)rnd((uint64_t)end + 1);
  }
  put(w, f[VTA_LOOP_UOP_BGN], bgn);
  put(w, f[VTA_LOOP_UOP_END], end);
  uint32_t io = chance(90) ? (uint32_t)rnd(4) : (uint32_t)rnd(64), ii = chance(90) ? (uint32_t)rnd(4) : (uint32_t)rnd(64);
  if (chance(2)) io = (uint32_t)mask_of(f[VTA_LOOP_ITER_OUT].width); /* runs into the cycle budget */
  if (chance(2)) ii = (uint32_t)mask_of(f[VTA_LOOP_ITER_IN].width);
  put(w, f[VTA_LOOP_ITER_OUT], io);
  put(w, f[VTA_LOOP_ITER_IN], ii);
  for (int k = VTA_LOOP_DST_OUT; k <= VTA_LOOP_SRC_IN; k++) put(w, f[k], small_or(3, f[k].width));
  if (opcode == OP_GEMM) {
    put(w, f[VTA_GEMM_WGT_OUT], small_or(3, f[VTA_GEMM_WGT_OUT].width));
    put(w, f[VTA_GEMM_WGT_IN], small_or(3, f[VTA_GEMM_WGT_IN].width));
  } else {
    put(w, f[VTA_ALU_OPCODE], g_clean || chance(95) ? rnd(5) : rnd(8));
    put(w, f[VTA_ALU_USE_IMM], chance(50));
    put(w, f[VTA_ALU_IMM], chance(70) ? rnd(40) - 8 : next64()); /* masked: negative values sign-wrap */
  }
  random_flags(w, f, flag_mode, 1);
}

/* Builds 1..MAX_INSNS instructions; returns the count. *must_fail: the stream cannot pass validation. */
static uint32_t gen_program(const ctx_t *c, uint8_t *prog, int *must_fail) {
  uint32_t n = 1 + (uint32_t)rnd(MAX_INSNS);
  g_clean = chance(50);
  int flag_mode = g_clean ? (chance(60) ? 0 : 2) : (int)rnd(3);
  *must_fail = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t w[2] = {0, 0};
    uint32_t op;
    if (i == n - 1 && (g_clean || chance(92))) {
      op = OP_FINISH;
    } else {
      uint64_t r = rnd(g_clean ? 95 : 100);
      op = r < 30 ? OP_LOAD : r < 45 ? OP_STORE : r < 65 ? OP_GEMM : r < 85 ? OP_ALU : r < 95 ? OP_FINISH : 99;
    }
    switch (op) {
      case OP_LOAD:
      case OP_STORE: gen_mem(c, w, op, flag_mode); break;
      case OP_GEMM:
      case OP_ALU: gen_loop(c, w, op, flag_mode); break;
      case OP_FINISH:
        if (chance(20)) w[0] = next64(), w[1] = next64(); /* FINISH ignores the other bits */
        put(w, c->p.mem[VTA_MEM_OPCODE], OP_FINISH);
        random_flags(w, c->p.mem, flag_mode, 1);
        break;
      default:
        w[0] = next64(); /* 16 bytes of garbage, or a random opcode on otherwise sane bits */
        w[1] = next64();
        if (chance(50)) put(w, c->p.mem[VTA_MEM_OPCODE], 5 + rnd(3));
    }
    uint32_t opc = (uint32_t)((w[c->p.mem[VTA_MEM_OPCODE].offset / 64] >> (c->p.mem[VTA_MEM_OPCODE].offset % 64)) &
                              mask_of(c->p.mem[VTA_MEM_OPCODE].width));
    if (opc > OP_ALU || (i == n - 1 && opc != OP_FINISH)) *must_fail = 1;
    emit(prog + 16 * i, w);
  }
  return n;
}

/* ------------------------------------------------------------------ targeted probes with exact outcomes */

/* Runs `n` instructions and checks the exact status and error_index. */
static vta_stats_t g_probe_stats; /* the stats of the last run_expect */

static void run_expect_work(ctx_t *c, const uint8_t *prog, uint32_t n, uint64_t max_cycles, uint64_t max_work,
                            int expect, int64_t index, const char *what) {
  vta_stats_t st;
  clear_err();
  int rc = vta_sim_run(c->sim, prog, n, (int)rnd(2), max_cycles, max_work, &st, NULL, g_err, sizeof g_err);
  count_api(rc);
  digest_run(rc, &st);
  check_message(rc, "vta_sim_run");
  EXPECT(rc == expect, "%s: probe '%s' returned %s, expected %s (%s)", c->name, what, rc_name(rc), rc_name(expect),
         rc ? g_err : "");
  if (rc == expect)
    EXPECT(st.error_index == (rc == VTA_OK ? -1 : index), "%s: probe '%s': error_index %lld, expected %lld", c->name,
           what, (long long)st.error_index, (long long)(rc == VTA_OK ? -1 : index));
  EXPECT(st.work <= max_work, "%s: probe '%s': host work %llu past max_work %llu", c->name, what,
         (unsigned long long)st.work, (unsigned long long)max_work);
  g_probe_stats = st;
}

static void run_expect(ctx_t *c, const uint8_t *prog, uint32_t n, uint64_t max_cycles, int expect, int64_t index,
                       const char *what) {
  run_expect_work(c, prog, n, max_cycles, NO_WORK_LIMIT, expect, index, what);
}

static void finish_insn(const ctx_t *c, uint8_t *dst) {
  uint64_t w[2] = {0, 0};
  put(w, c->p.mem[VTA_MEM_OPCODE], OP_FINISH);
  emit(dst, w);
}

/* First element of the known-good region for element size e, and how many whole elements it holds. */
static void good_elems(uint32_t e, uint64_t *first, uint64_t *n) {
  uint64_t a = round_up(GOOD_BASE, e);
  *first = a / e;
  *n = (GOOD_BASE + GOOD_SIZE - a) / e;
}

static void probe(ctx_t *c) {
  g_phase = "probe";
  static const uint32_t load_types[] = {MEM_UOP, MEM_WGT, MEM_INP, MEM_ACC, MEM_ACC_8BIT};
  const vta_field_t *mf = c->p.mem;
  uint8_t prog[3 * 16];
  uint64_t w[2] = {0, 0};
  int bad = (int)rnd(2);
  uint32_t store = (uint32_t)rnd(2), mem = store ? MEM_OUT : load_types[rnd(5)];
  uint32_t e = dram_elem(c, mem), depth = sram_depth(c, mem);
  uint64_t first, nelem;
  good_elems(e, &first, &nelem);
  /* a valid 1x1 transfer through the known-good region, which each probe then bends */
  encode_mem(c, w, store ? OP_STORE : OP_LOAD, mem, 0, first, 1, 1, 1, 0, 0);
  finish_insn(c, prog + 16);
  switch (rnd(14)) {
    case 0: /* y_size 0 with x_size > 0 */
      put(w, mf[VTA_MEM_Y_SIZE], 0);
      put(w, mf[VTA_MEM_X_SIZE], 1 + rnd(4));
      emit(prog, w);
      run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 0, "y_size 0");
      break;
    case 1: /* padding on a store */
      encode_mem(c, w, OP_STORE, MEM_OUT, 0, first, 1, 1, 1, 0, 0);
      {
        const uint64_t pad = rnd(4), amount = 1 + rnd(15); /* one draw a statement: argument order is unspecified */
        put(w, mf[VTA_MEM_Y_PAD_0 + pad], amount);
      }
      emit(prog, w);
      run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 0, "store padding");
      break;
    case 2: { /* memory types a LOAD or STORE refuses */
      static const uint32_t bad_load[] = {MEM_OUT, 6, 7}, bad_store[] = {0, 1, 2, 3, 5, 6, 7};
      put(w, mf[VTA_MEM_MEMORY_TYPE], store ? bad_store[rnd(7)] : bad_load[rnd(3)]);
      emit(prog, w);
      run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 0, "memory type");
      break;
    }
    case 3: { /* SRAM range flush with the end of the buffer, or one element past it */
      uint32_t x = 1 + (uint32_t)rnd(3), y = 1 + (uint32_t)rnd(2), pads[4] = {0, 0, 0, 0};
      if (!store)
        for (int k = 0; k < 4; k++) pads[k] = (uint32_t)rnd(2);
      uint64_t need = (uint64_t)(pads[0] + y + pads[1]) * (pads[2] + x + pads[3]);
      if (need + (uint64_t)bad > depth || (uint64_t)(y - 1) * x + x > nelem) break;
      if (depth - need + (uint64_t)bad > mask_of(mf[VTA_MEM_SRAM_BASE].width)) break;
      encode_mem(c, w, store ? OP_STORE : OP_LOAD, mem, (uint32_t)(depth - need + (uint64_t)bad), first, y, x, x, 0, 0);
      put(w, mf[VTA_MEM_Y_PAD_0], pads[0]);
      put(w, mf[VTA_MEM_Y_PAD_1], pads[1]);
      put(w, mf[VTA_MEM_X_PAD_0], pads[2]);
      put(w, mf[VTA_MEM_X_PAD_1], pads[3]);
      emit(prog, w);
      run_expect(c, prog, 2, 200000, bad ? VTA_ERR_INSN : VTA_OK, 0, "SRAM range edge");
      break;
    }
    case 4: { /* DRAM range flush with the end of the region, or one element past it */
      uint32_t x = 1 + (uint32_t)rnd(3), y = 1 + (uint32_t)rnd(2), stride = x + (uint32_t)rnd(2);
      uint64_t extent = (uint64_t)(y - 1) * stride + x;
      if (extent > nelem || (uint64_t)y * x > depth) break;
      uint64_t base = first + nelem - extent + (uint64_t)bad;
      encode_mem(c, w, store ? OP_STORE : OP_LOAD, mem, 0, base, y, x, stride, 0, 0);
      emit(prog, w);
      /* one element past is refused, unless a region mapped right after holds the whole range */
      int inside = mirror_inside(c, base * e, extent * e);
      EXPECT(inside == !bad || (bad && extent == 1), "%s: mirror disagrees with the DRAM edge probe", c->name);
      run_expect(c, prog, 2, 200000, inside ? VTA_OK : VTA_ERR_MEM, 0, "DRAM range edge");
      break;
    }
    case 5: { /* micro-op range: [bgn, depth) is fine, depth + 1 or bgn > end is not */
      uint32_t op = chance(50) ? OP_GEMM : OP_ALU;
      const vta_field_t *f = op == OP_GEMM ? c->p.gemm : c->p.alu;
      w[0] = w[1] = 0;
      put(w, f[VTA_LOOP_OPCODE], op);
      uint32_t end = c->p.uop_depth + (uint32_t)bad, bgn = end - (uint32_t)rnd(end < 3 ? (uint64_t)end + 1 : 3);
      if (bad && chance(50)) { end = (uint32_t)rnd(c->p.uop_depth); bgn = end + 1 + (uint32_t)rnd(2); }
      if (bgn > mask_of(f[VTA_LOOP_UOP_BGN].width) || end > mask_of(f[VTA_LOOP_UOP_END].width)) break; /* no room */
      put(w, f[VTA_LOOP_UOP_BGN], bgn);
      put(w, f[VTA_LOOP_UOP_END], end);
      put(w, f[VTA_LOOP_ITER_OUT], 0); /* a no-op when valid: no index checks */
      put(w, f[VTA_LOOP_ITER_IN], 1);
      emit(prog, w);
      run_expect(c, prog, 2, 200000, bad ? VTA_ERR_INSN : VTA_OK, 0, "micro-op range");
      break;
    }
    case 6: /* unknown ALU opcode */
      w[0] = w[1] = 0;
      put(w, c->p.alu[VTA_LOOP_OPCODE], OP_ALU);
      put(w, c->p.alu[VTA_ALU_OPCODE], 5 + rnd(3));
      emit(prog, w);
      run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 0, "ALU opcode");
      break;
    case 7: /* dependency flags a module does not have (checked on NOPs too) */
      if (store) {
        encode_mem(c, w, OP_STORE, MEM_OUT, 0, first, 1, chance(50), 1, 0, 0);
        put(w, mf[chance(50) ? VTA_MEM_POP_NEXT : VTA_MEM_PUSH_NEXT], 1);
      } else {
        encode_mem(c, w, OP_LOAD, chance(50) ? MEM_INP : MEM_WGT, 0, 0, 1, 0, 1, 0, 0);
        put(w, mf[chance(50) ? VTA_MEM_POP_PREV : VTA_MEM_PUSH_PREV], 1);
      }
      emit(prog, w);
      run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 0, "module flags");
      break;
    case 8: /* a stream that does not end with FINISH */
      encode_mem(c, w, OP_LOAD, MEM_INP, 0, 0, 1, 0, 1, 0, 0); /* a NOP */
      emit(prog, w);
      if (chance(50)) {
        run_expect(c, prog, 1, 200000, VTA_ERR_INSN, 0, "no FINISH (1)");
      } else {
        finish_insn(c, prog);
        emit(prog + 16, w);
        run_expect(c, prog, 2, 200000, VTA_ERR_INSN, 1, "no FINISH (2)");
      }
      break;
    case 9: /* unknown opcode in the middle */
      w[0] = next64(), w[1] = next64();
      put(w, mf[VTA_MEM_OPCODE], 5 + rnd(3));
      finish_insn(c, prog);
      emit(prog + 16, w);
      finish_insn(c, prog + 32);
      run_expect(c, prog, 3, 200000, VTA_ERR_INSN, 1, "unknown opcode");
      break;
    case 10: { /* a micro-op reaching exactly the last element of a buffer, or one past it */
      uint32_t op = chance(50) ? OP_GEMM : OP_ALU, which = (uint32_t)rnd(op == OP_GEMM ? 3 : 2);
      static const uint32_t gemm_mem[] = {MEM_ACC, MEM_INP, MEM_WGT}, alu_mem[] = {MEM_ACC, MEM_ACC};
      uint32_t d = sram_depth(c, op == OP_GEMM ? gemm_mem[which] : alu_mem[which]);
      uint32_t iters = d >= 2 ? 2 : 1, value = d - iters + (uint32_t)bad; /* value + (iters-1) reaches d-1+bad */
      if (value > mask_of(c->p.uop[which].width)) break;
      uint32_t k = (uint32_t)rnd(c->p.uop_depth < 8 ? c->p.uop_depth : 8);
      uint64_t u[2] = {0, 0};
      put(u, c->p.uop[which], value);
      uint32_t u32 = (uint32_t)u[0];
      if (do_sram(c, MEM_UOP, k, 1, (uint8_t *)&u32, 1) != VTA_OK) break;
      const vta_field_t *f = op == OP_GEMM ? c->p.gemm : c->p.alu;
      static const int factor[] = {VTA_LOOP_DST_OUT, VTA_LOOP_SRC_OUT, VTA_GEMM_WGT_OUT};
      w[0] = w[1] = 0;
      put(w, f[VTA_LOOP_OPCODE], op);
      put(w, f[VTA_LOOP_UOP_BGN], k);
      put(w, f[VTA_LOOP_UOP_END], k + 1);
      put(w, f[VTA_LOOP_ITER_OUT], iters);
      put(w, f[VTA_LOOP_ITER_IN], 1);
      put(w, f[factor[which]], 1);
      if (op == OP_ALU) put(w, f[VTA_ALU_OPCODE], rnd(5));
      emit(prog, w);
      run_expect(c, prog, 2, 200000, bad ? VTA_ERR_INSN : VTA_OK, 0, "micro-op index edge");
      break;
    }
    case 11: { /* host work budget edge: a GEMM or ALU of known work, with max_work = its work or one less */
      uint32_t op = chance(50) ? OP_GEMM : OP_ALU, reset = op == OP_GEMM && chance(30);
      const vta_field_t *f = op == OP_GEMM ? c->p.gemm : c->p.alu;
      uint32_t io = 1 + (uint32_t)rnd(3), ii = 1 + (uint32_t)rnd(3), nu = 1 + (uint32_t)rnd(c->p.uop_depth < 3 ? c->p.uop_depth : 3);
      uint32_t zero = 0;
      for (uint32_t k = 0; k < nu; k++) do_sram(c, MEM_UOP, k, 1, (uint8_t *)&zero, 1); /* every index 0 */
      w[0] = w[1] = 0;
      put(w, f[VTA_LOOP_OPCODE], op);
      put(w, f[VTA_LOOP_RESET], reset);
      put(w, f[VTA_LOOP_UOP_END], nu);
      put(w, f[VTA_LOOP_ITER_OUT], io);
      put(w, f[VTA_LOOP_ITER_IN], ii);
      if (op == OP_ALU) put(w, f[VTA_ALU_OPCODE], rnd(5));
      emit(prog, w);
      /* a reset GEMM computes its sum in mode hls (the output buffer gets acc + sum: docs/simulator.md) */
      const int sums = op == OP_GEMM && (!reset || c->out_mode == OUT_HLS);
      uint64_t per = (uint64_t)c->p.batch * c->p.block_out * (sums ? c->p.block_in : 1);
      uint64_t work = (uint64_t)io * ii * nu * per;
      run_expect_work(c, prog, 2, UINT64_MAX, work - (uint64_t)bad, bad ? VTA_ERR_WORK : VTA_OK, 0, "work budget edge");
      if (!bad)
        EXPECT(g_probe_stats.work == work, "%s: work budget edge: host work %llu, expected %llu", c->name,
               (unsigned long long)g_probe_stats.work, (unsigned long long)work);
      break;
    }
    case 12: { /* the hang of issue #10: every loop field at its maximum and no cycle budget to speak of; only the
                * host work budget stops it, before it executes (a regression makes this driver run for hours) */
      uint32_t op = chance(50) ? OP_GEMM : OP_ALU;
      const vta_field_t *f = op == OP_GEMM ? c->p.gemm : c->p.alu;
      w[0] = w[1] = 0;
      put(w, f[VTA_LOOP_OPCODE], op);
      put(w, f[VTA_LOOP_RESET], op == OP_GEMM && chance(30));
      put(w, f[VTA_LOOP_UOP_END], c->p.uop_depth);
      put(w, f[VTA_LOOP_ITER_OUT], mask_of(f[VTA_LOOP_ITER_OUT].width));
      put(w, f[VTA_LOOP_ITER_IN], mask_of(f[VTA_LOOP_ITER_IN].width));
      emit(prog, w);
      /* at least (2^14 - 1)^2 micro-op iterations of one unit or more: far past 2^20 */
      run_expect_work(c, prog, 2, UINT64_MAX, 1 + rnd((uint64_t)1 << 20), VTA_ERR_WORK, 0, "hostile host work");
      EXPECT(g_probe_stats.work == 0, "%s: hostile host work: %llu units done before the refusal", c->name,
             (unsigned long long)g_probe_stats.work);
      break;
    }
    default: { /* a lone FINISH ends at DRAM_LATENCY + ceil(16 / BUS_BYTES) + 1: the budget is inclusive */
      uint64_t end = c->p.dram_latency + (16 + c->p.bus_bytes - 1) / c->p.bus_bytes + 1;
      finish_insn(c, prog);
      run_expect(c, prog, 1, end - (uint64_t)bad, bad ? VTA_ERR_BUDGET : VTA_OK, 0, "cycle budget edge");
      break;
    }
  }
}

static void random_sram_state(ctx_t *c) {
  uint8_t buf[16 * 4];
  if (chance(50)) { /* micro-ops, mostly small indices */
    uint32_t idx = chance(80) ? (uint32_t)rnd(8) : (uint32_t)rnd((uint64_t)c->p.uop_depth + 4);
    uint32_t n = 1 + (uint32_t)rnd(16);
    for (uint32_t k = 0; k < n; k++) {
      uint64_t w[2] = {0, 0};
      if (chance(85)) {
        static const int mems[VTA_UOP_NFIELDS] = {MEM_ACC, MEM_INP, MEM_WGT};
        for (int f = 0; f < VTA_UOP_NFIELDS; f++) {
          uint32_t d = sram_depth(c, (uint32_t)mems[f]);
          put(w, c->p.uop[f], rnd(chance(80) ? (d < 8 ? d : 8) : 64));
        }
      } else {
        w[0] = next64();
      }
      uint32_t u = (uint32_t)w[0];
      memcpy(buf + 4 * k, &u, 4);
    }
    do_sram(c, MEM_UOP, idx, n, buf, 1);
  }
  if (chance(10)) { /* a few random data elements */
    uint32_t mem = 1 + (uint32_t)rnd(3), e = sram_elem(c, mem);
    uint32_t n = 1 + (uint32_t)rnd(2);
    uint8_t *data = malloc((size_t)n * e);
    if (!data) exit(2);
    for (size_t k = 0; k < (size_t)n * e; k++) data[k] = (uint8_t)next64();
    do_sram(c, mem, (uint32_t)rnd(sram_depth(c, mem) < 8 ? sram_depth(c, mem) : 8), n, data, 1);
    free(data);
  }
}

static void run_random_program(ctx_t *c) {
  g_phase = "program";
  static uint8_t prog[MAX_INSNS * 16];
  int must_fail;
  uint32_t n = gen_program(c, prog, &must_fail);
  int compute = (int)rnd(2);
  uint64_t max_cycles = chance(85) ? 200000 : 1 + rnd(2000);
  uint64_t max_work = chance(80) ? NO_WORK_LIMIT : rnd(4000); /* 0 admits only programs without work */
  vta_trace_event_t trace[MAX_INSNS];
  int use_trace = chance(30);
  if (use_trace) memset(trace, 0xee, sizeof trace);
  vta_stats_t st;
  clear_err();
  int rc = vta_sim_run(c->sim, prog, n, compute, max_cycles, max_work, &st, use_trace ? trace : NULL, g_err,
                       sizeof g_err);
  prog_rc[rc_index(rc)]++;
  digest_run(rc, &st);
  if (g_clean) clean_rc[rc_index(rc)]++;
  EXPECT(st.work <= max_work, "%s: host work %llu past max_work %llu (%s)", c->name, (unsigned long long)st.work,
         (unsigned long long)max_work, rc_name(rc));
  if (rc == VTA_OK || rc == VTA_ERR_DEADLOCK || rc == VTA_ERR_BUDGET || rc == VTA_ERR_INSN || rc == VTA_ERR_WORK) {
    executed += st.insns[0] + st.insns[1] + st.insns[2];
    gemm_ops += st.gemm_counter;
    alu_ops += st.alu_counter;
  }
  if (rc != VTA_OK) g_pending = 1;
  check_message(rc, "vta_sim_run");
  EXPECT(rc != VTA_ERR_ARG, "%s: run of a %u-instruction program returned arg: %s", c->name, n, g_err);
  if (must_fail)
    EXPECT(rc == VTA_ERR_INSN || rc == VTA_ERR_MEM, "%s: invalid stream returned %s", c->name, rc_name(rc));
  if (rc == VTA_OK) {
    EXPECT(st.error_index == -1, "%s: error_index %lld after success", c->name, (long long)st.error_index);
    EXPECT(st.insns[0] + st.insns[1] + st.insns[2] == n, "%s: executed %llu of %u instructions", c->name,
           (unsigned long long)(st.insns[0] + st.insns[1] + st.insns[2]), n);
    EXPECT(st.cycles <= max_cycles && st.finish_cycle > 0 && st.finish_cycle <= st.cycles,
           "%s: cycles %llu, finish %llu, budget %llu", c->name, (unsigned long long)st.cycles,
           (unsigned long long)st.finish_cycle, (unsigned long long)max_cycles);
    for (int m = 0; m < 3; m++)
      EXPECT(st.busy[m] <= st.cycles, "%s: module %d busy %llu > cycles", c->name, m, (unsigned long long)st.busy[m]);
    if (use_trace)
      for (uint32_t i = 0; i < n; i++)
        EXPECT(trace[i].start < trace[i].end && trace[i].end <= st.cycles && trace[i].module < 3,
               "%s: bad trace event %u", c->name, i);
  } else if ((rc >= VTA_ERR_INSN && rc <= VTA_ERR_BUDGET) || rc == VTA_ERR_WORK) {
    EXPECT(st.error_index >= 0 && st.error_index < (int64_t)n, "%s: %s with error_index %lld of %u", c->name,
           rc_name(rc), (long long)st.error_index, n);
  }
}

/* ------------------------------------------------------------------ API misuse */

static void misuse(ctx_t *c) {
  g_phase = "misuse";
  static uint8_t buf[4 * 4096 + 64]; /* never uninitialised: writes from it land in DRAM, which the digest reads */
  int rc = VTA_OK;
  const region_t *r = &c->reg[rnd((uint64_t)c->nreg)]; /* nreg >= 1: the known-good region */
  switch (rnd(16)) {
    case 0: /* map overlapping a mapped region */
      {
        const uint64_t addr = r->base + rnd(r->size), size = 1 + rnd(2 * PAGE);
        rc = do_map(c, addr, size);
      }
      break;
    case 1: /* map of size 0 */
      rc = do_map(c, (1 + rnd(1 << 20)) * PAGE, 0);
      break;
    case 2: { /* map beyond 2^48, too large, or at the end of the 64-bit space */
      uint64_t size = 1 + rnd(3 * PAGE);
      switch (rnd(5)) {
        case 0: rc = do_map(c, TOP48 - size + 1 + rnd(PAGE), size); break;
        case 1: rc = do_map(c, UINT64_MAX - rnd(PAGE), size); break;
        case 2: {
          const uint64_t addr = PAGE * (1 + rnd(16)), huge = TOP48 + rnd(PAGE);
          rc = do_map(c, addr, huge);
          break;
        }
        case 3: rc = do_map(c, PAGE, UINT64_MAX - rnd(2)); break;
        default: rc = do_map(c, 0, ((uint64_t)1 << 40) + 1 + rnd(PAGE)); break;
      }
      break;
    }
    case 3: { /* unmap an address where no region starts */
      uint64_t addr;
      switch (rnd(4)) {
        case 0: addr = r->base + 1 + rnd(r->size); break;
        case 1: addr = r->base - 1; break;
        case 2: addr = UINT64_MAX - rnd(8); break;
        default: addr = next64();
      }
      if (mirror_find_base(c, addr) < 0) rc = do_unmap(c, addr);
      break;
    }
    case 4: { /* read or write straddling a region's end (or its start) */
      uint64_t k = rnd((r->size < 8 ? r->size : 8) + 1);
      uint64_t addr = chance(75) ? r->base + r->size - k : r->base - 1 - rnd(4), n = k + 1 + rnd(8);
      rc = chance(50) ? do_read(c, addr, buf, n) : do_write(c, addr, buf, n);
      break;
    }
    case 5: { /* addresses near UINT64_MAX, where addr + n wraps */
      uint64_t addr = UINT64_MAX - rnd(16), n = rnd(64);
      rc = chance(50) ? do_read(c, addr, buf, n) : do_write(c, addr, buf, n);
      break;
    }
    case 6: { /* huge lengths from a valid start */
      uint64_t n = chance(50) ? UINT64_MAX - rnd(3) : r->size + 1 + rnd(PAGE);
      rc = chance(50) ? do_read(c, r->base, buf, n) : do_write(c, r->base, buf, n);
      break;
    }
    case 7: { /* valid write + read back, zero-length accesses at the region's edges */
      uint64_t n = rnd((r->size < 256 ? r->size : 256) + 1), off = rnd(r->size - n + 1);
      uint8_t data[256], back[256];
      for (uint64_t i = 0; i < n; i++) data[i] = (uint8_t)next64();
      if (do_write(c, r->base + off, data, n) == VTA_OK && do_read(c, r->base + off, back, n) == VTA_OK)
        EXPECT(memcmp(data, back, (size_t)n) == 0, "%s: DRAM read-back differs", c->name);
      rc = do_read(c, r->base + r->size, buf, 0);
      rc |= do_write(c, r->base, NULL, 0);
      break;
    }
    case 8: { /* SRAM ranges at and past the end */
      uint32_t mem = (uint32_t)rnd(4), depth = sram_depth(c, mem), idx, count;
      switch (rnd(4)) {
        case 0: idx = depth - (uint32_t)rnd(depth < 3 ? depth + 1 : 3); count = (uint32_t)rnd(4); break;
        case 1: idx = UINT32_MAX - (uint32_t)rnd(2); count = 1 + (uint32_t)rnd(2); break;
        case 2: idx = (uint32_t)rnd(2); count = UINT32_MAX - (uint32_t)rnd(2); break;
        default: idx = depth + (uint32_t)rnd(3); count = 0; break;
      }
      if ((uint64_t)count * sram_elem(c, mem) > sizeof buf && (uint64_t)idx + count <= depth) break;
      uint8_t *target = count == 0 && chance(50) ? NULL : buf;
      const int write = (int)rnd(2);
      rc = do_sram(c, mem, idx, count, target, write);
      break;
    }
    case 9: { /* unknown SRAM ids (4 is OUT, the output buffer: readable) */
      static const uint32_t ids[] = {5, 6, 7, 8, 9, 100, 0x7fffffffu, UINT32_MAX};
      const uint32_t id = ids[rnd(8)];
      const int write = (int)rnd(2); /* drawn apart from id: the order of a call's arguments is unspecified (GCC
                                      * evaluates them in different orders on x86-64 and armv7) */
      rc = do_sram(c, id, 0, 1, buf, write);
      break;
    }
    case 10: { /* run with no instructions, NULL instructions, or no stats */
      vta_stats_t st;
      uint8_t finish[16];
      uint64_t w[2] = {0, 0};
      put(w, c->p.mem[VTA_MEM_OPCODE], OP_FINISH);
      emit(finish, w);
      clear_err();
      switch (rnd(3)) {
        case 0:
          rc = vta_sim_run(c->sim, finish, 0, 1, 1000, NO_WORK_LIMIT, &st, NULL, g_err, sizeof g_err);
          EXPECT(rc == VTA_ERR_INSN, "%s: run with count 0 returned %s", c->name, rc_name(rc));
          break;
        case 1:
          rc = vta_sim_run(c->sim, NULL, 1 + (uint32_t)rnd(100), 1, 1000, NO_WORK_LIMIT, &st, NULL, g_err, sizeof g_err);
          EXPECT(rc == VTA_ERR_INSN, "%s: run with NULL instructions returned %s", c->name, rc_name(rc));
          break;
        default:
          rc = vta_sim_run(c->sim, finish, 1, 1, 1000, NO_WORK_LIMIT, NULL, NULL, g_err, sizeof g_err);
          EXPECT(rc == VTA_ERR_ARG, "%s: run with NULL stats returned %s", c->name, rc_name(rc));
      }
      count_api(rc);
      check_message(rc, "vta_sim_run");
      break;
    }
    case 11: { /* small or absent message buffers */
      size_t len = (size_t)rnd(3) * 4; /* 0 (with NULL), 4, 8 */
      char small[16];
      memset(small, 0x5a, sizeof small);
      rc = vta_sim_unmap(c->sim, UINT64_MAX, len ? small : NULL, len);
      count_api(rc);
      EXPECT(rc == VTA_ERR_MEM, "%s: unmap(UINT64_MAX) returned %s", c->name, rc_name(rc));
      if (len) {
        EXPECT(small[len - 1] == 0 && strlen(small) == len - 1 && (unsigned char)small[len] == 0x5a,
               "%s: message not truncated to a %zu-byte buffer", c->name, len);
      }
      break;
    }
    case 12: { /* a FINISH-only program, and a run with a trace of an empty-ish program */
      uint8_t finish[16];
      uint64_t w[2] = {0, 0};
      put(w, c->p.mem[VTA_MEM_OPCODE], OP_FINISH);
      emit(finish, w);
      vta_stats_t st;
      vta_trace_event_t ev;
      clear_err();
      /* FINISH does no host work, so even max_work = 0 admits it */
      rc = vta_sim_run(c->sim, finish, 1, (int)rnd(2), chance(50) ? 0 : 1000, chance(50) ? 0 : NO_WORK_LIMIT, &st, &ev,
                       g_err, sizeof g_err);
      count_api(rc);
      check_message(rc, "vta_sim_run");
      EXPECT(rc == VTA_OK || rc == VTA_ERR_BUDGET, "%s: FINISH-only program returned %s", c->name, rc_name(rc));
      EXPECT(st.work == 0, "%s: FINISH-only program did %llu units of host work", c->name, (unsigned long long)st.work);
      break;
    }
    case 13: /* map adjacent to an existing region (valid unless something is there) */
      rc = do_map(c, r->base + r->size, 1 + rnd(PAGE));
      if (rc == VTA_OK) do_unmap(c, r->base + r->size);
      rc = VTA_OK;
      break;
    case 14: /* unmap and remap a pool region */
      if (c->nreg > 1 && r != &c->reg[0]) {
        region_t old = *r;
        do_unmap(c, old.base);
        rc = do_map(c, old.base, old.size);
      }
      break;
    default: { /* reset: every SRAM reads back as zeros */
      if (!chance(10)) break;
      vta_sim_reset(c->sim);
      uint32_t mem = (uint32_t)rnd(4), e = sram_elem(c, mem);
      if (do_sram(c, mem, (uint32_t)rnd(sram_depth(c, mem)), 1, buf, 0) == VTA_OK) {
        int zero = 1;
        for (uint32_t i = 0; i < e; i++) zero &= buf[i] == 0;
        EXPECT(zero, "%s: SRAM %u not zero after reset", c->name, mem);
      }
      break;
    }
  }
  (void)rc;
}

/* ------------------------------------------------------------------ creation */

/* Parameters the simulator must refuse: create returns NULL with a message. */
static void bad_params(const vta_params_t *good) {
  g_phase = "bad-params";
  clear_err();
  EXPECT(vta_sim_create(NULL, g_err, sizeof g_err) == NULL && g_err[0] && g_err[0] != 0x5a,
         "create(NULL) did not fail with a message");
  vta_sim_destroy(NULL);
  for (int k = 0; k < 40; k++) {
    vta_params_t p = *good;
    switch (k) {
      case 0: p.batch = 0; break;
      case 1: p.block_in = 0; break;
      case 2: p.block_out = 257; break;
      case 3: p.uop_depth = 0; break;
      case 4: p.acc_depth = 65537; break;
      case 5: p.bus_bytes = 0; break;
      case 6: p.burst_beats = 0; break;
      case 7: p.gemm_ii = 0; break;
      case 8: p.alu_ii = 0; break;
      case 9: p.insn_queue_depth = 0; break;
      case 10: p.token_queue_depth = 0; break;
      case 11: p.mem[VTA_MEM_OPCODE].width = 0; break;
      case 12: p.gemm[VTA_LOOP_ITER_IN].width = 33; break;
      case 13: p.alu[VTA_ALU_IMM].offset = 120; break;                 /* 120 + 16 > 128 */
      case 14: p.mem[VTA_MEM_DRAM_BASE].offset = 48; break;            /* straddles bit 64 */
      case 15: p.uop[VTA_UOP_WGT].offset = 28; break;                  /* past 32 bits */
      case 16: p.mem[VTA_MEM_X_SIZE].offset = 0xffffffe0u; p.mem[VTA_MEM_X_SIZE].width = 32; break; /* wraps */
      case 17: p.mem[VTA_MEM_OPCODE].offset = UINT32_MAX; p.mem[VTA_MEM_OPCODE].width = 1; break;   /* wraps */
      case 18: p.gemm[VTA_GEMM_WGT_IN].offset = 0xfffffff0u; p.gemm[VTA_GEMM_WGT_IN].width = 16; break;
      case 19: p.alu[VTA_ALU_IMM].offset = 0xffffffc0u; p.alu[VTA_ALU_IMM].width = 32; break;
      case 20: p.uop[VTA_UOP_DST].offset = 0xfffffff0u; p.uop[VTA_UOP_DST].width = 16; break;
      case 21: p.uop[VTA_UOP_SRC].offset = UINT32_MAX; p.uop[VTA_UOP_SRC].width = 1; break;
      case 22: p.uop[VTA_UOP_WGT].width = 0; break;
      case 23: p.mem[VTA_MEM_Y_PAD_1].offset = 0x80000000u; break;
      case 24: p.batch = 65; break;
      case 25: p.wgt_depth = 0; break;
      case 26: p.inp_depth = UINT32_MAX; break;
      case 27: p.alu[VTA_ALU_IMM].width = UINT32_MAX; break;
      case 28: p.block_in = 300; break;
      case 29: p.inp_depth = 0; break;
      case 30: p.acc_depth = 0; break;
      case 31: p.uop_depth = 65537; break;
      case 32: p.wgt_depth = 1u << 31; break;
      /* bounds that keep cycle arithmetic from wrapping */
      case 33: p.gemm_ii = 1u << 25; break;
      case 34: p.dram_latency = UINT32_MAX; break;
      case 35: p.gemm[VTA_LOOP_ITER_OUT].width = 20; break;
      case 36: p.alu[VTA_LOOP_UOP_END].width = 24; break;
      case 37: p.mem[VTA_MEM_X_SIZE].width = 24; break;
      case 38: p.mem[VTA_MEM_X_PAD_0].width = 8; break;
      default: p.block_out = 0; break;
    }
    clear_err();
    vta_sim_t *s = vta_sim_create(&p, g_err, sizeof g_err);
    EXPECT(s == NULL, "bad parameter set %d was accepted", k);
    if (s) {
      vta_sim_destroy(s);
    } else {
      EXPECT(memchr(g_err, 0, sizeof g_err) && g_err[0] && g_err[0] != 0x5a, "bad parameter set %d: no message", k);
    }
  }
}

static uint32_t pick(const uint32_t *v, size_t n) { return v[rnd(n)]; }

static void set_out_mode(ctx_t *c, int mode, int strict);

static void ctx_init(ctx_t *c, const char *name, const vta_params_t *p, int out_mode) {
  memset(c, 0, sizeof *c);
  c->name = name;
  c->p = *p;
  c->inp_elem = p->batch * p->block_in;
  c->wgt_elem = p->block_out * p->block_in;
  c->acc_elem = p->batch * p->block_out * 4;
  c->out_elem = p->batch * p->block_out;
  clear_err();
  c->sim = vta_sim_create(p, g_err, sizeof g_err);
  if (!c->sim) {
    fprintf(stderr, "hostile: %s: vta_sim_create failed: %s\n", name, g_err);
    exit(2);
  }
  if (c->acc_elem > 4096 || c->out_elem > 1024) {
    fprintf(stderr, "hostile: %s: elements too large for the known-good buffers\n", name);
    exit(2);
  }
  if (do_map(c, GOOD_BASE, GOOD_SIZE) != VTA_OK) exit(2);
  c->out_mode = out_mode;
  set_out_mode(c, out_mode, 0);
  known_good(c, "creation");
}

/* A smaller machine with the same field layout: tiny depths and queues, odd shapes and timings. */
static void shrink(vta_params_t *p) {
  static const uint32_t batches[] = {1, 2, 4}, blocks[] = {1, 3, 8, 16, 32}, bus[] = {1, 3, 8, 16, 64};
  p->batch = pick(batches, 3);
  p->block_in = chance(30) ? 1 + (uint32_t)rnd(32) : pick(blocks, 5);
  p->block_out = chance(30) ? 1 + (uint32_t)rnd(32) : pick(blocks, 5);
  p->uop_depth = 1 + (uint32_t)rnd(64);
  p->inp_depth = 1 + (uint32_t)rnd(64);
  p->wgt_depth = 1 + (uint32_t)rnd(64);
  p->acc_depth = 2 + (uint32_t)rnd(64);
  p->bus_bytes = pick(bus, 5);
  p->dram_latency = (uint32_t)rnd(40);
  p->burst_beats = 1 + (uint32_t)rnd(16);
  p->burst_gap = (uint32_t)rnd(4);
  p->gemm_ii = 1 + (uint32_t)rnd(3);
  p->alu_ii = 1 + (uint32_t)rnd(3);
  p->compute_latency = (uint32_t)rnd(6);
  p->insn_queue_depth = 1 + (uint32_t)rnd(4);
  p->token_queue_depth = 1 + (uint32_t)rnd(3);
}

static int read_params(const char *path, vta_params_t *p) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return 0;
  }
  uint32_t v[NPARAMS];
  unsigned long long x;
  int n = 0;
  while (fscanf(f, "%llu", &x) == 1) {
    if (n == NPARAMS || x > UINT32_MAX) {
      fclose(f);
      fprintf(stderr, "hostile: %s: more than %d numbers, or a value above 2^32-1\n", path, NPARAMS);
      return 0;
    }
    v[n++] = (uint32_t)x;
  }
  int junk = !feof(f);
  fclose(f);
  if (n != NPARAMS || junk) {
    fprintf(stderr, "hostile: %s: expected %d unsigned integers, read %d%s\n", path, NPARAMS, n,
            junk ? " before something else" : "");
    return 0;
  }
  memcpy(p, v, sizeof *p);
  return 1;
}

/* The board re-timer (board_times.c) on random dependency graphs: references inside the stream time every
 * instruction (ends never before starts, each start after the references' times); any reference outside it is
 * refused before a time is written. */
static void hostile_board_times(void) {
  g_phase = "board_times";
  enum { N = 64 };
  int64_t order[N], ref[6][N];
  double duration[N], start[N], end[N], disp[N];
  for (unsigned trial = 0; trial < 400; trial++) {
    const uint64_t n = 1 + rnd(N);
    for (uint64_t i = 0; i < n; i++) {
      order[i] = (int64_t)i;
      for (int r = 0; r < 6; r++) ref[r][i] = i && chance(40) ? (int64_t)rnd(i) : -1; /* earlier ones: in order */
      duration[i] = (double)rnd(50);
    }
    const int bad = chance(50);
    if (bad) { /* one reference past the stream, or below -1, or an order entry out of range */
      const uint64_t i = rnd(n);
      const int r = (int)rnd(7);
      const int64_t v = chance(50) ? (int64_t)(n + rnd(1000)) : -2 - (int64_t)rnd(1000);
      if (r == 6) order[i] = v; else ref[r][i] = v;
    }
    for (uint64_t i = 0; i < n; i++) start[i] = end[i] = disp[i] = -7.0;
    const int rc = vta_board_times(n, order, ref[0], ref[1], ref[2], ref[3], ref[4], ref[5], duration, 1.0, 3.0,
                                   start, end, disp);
    if (bad) {
      int untouched = 1;
      for (uint64_t i = 0; i < n; i++) untouched &= start[i] == -7.0 && end[i] == -7.0 && disp[i] == -7.0;
      EXPECT(rc == VTA_ERR_ARG && untouched, "bad reference: rc=%d, untouched=%d", rc, untouched);
      continue;
    }
    EXPECT(rc == VTA_OK, "rc=%d", rc);
    for (uint64_t i = 0; i < n; i++) {
      int ok = end[i] == start[i] + duration[i] && start[i] >= disp[i] && disp[i] >= 4.0;
      /* refs: 0 prev, 1 room, 2-3 pops (wait for ends), 4-5 room for pushes (wait for starts) */
      for (int r = 0; r < 4; r += r == 0 ? 2 : 1) ok &= ref[r][i] < 0 || start[i] >= end[ref[r][i]];
      for (int r = 4; r < 6; r++) ok &= ref[r][i] < 0 || start[i] >= start[ref[r][i]];
      ok &= ref[1][i] < 0 || disp[i] >= start[ref[1][i]] + 1.0;
      EXPECT(ok, "instruction %llu of %llu timed inconsistently", (unsigned long long)i, (unsigned long long)n);
    }
  }
}

/* The board model's stream reader (board_times.c) on random instruction bytes: it reads exactly n instructions,
 * writes every output of every instruction, never indexes outside the stream (each reference -1 or below n), and
 * either succeeds or refuses with a message (a pop never pushed, a push onto a queue never popped). */
static void hostile_board_program(const vta_params_t *p) {
  g_phase = "board_program";
  enum { N = 96 };
  static const int64_t elem[8] = {4, 256, 16, 64, 16, 16, 0, 0};
  uint8_t *insns = malloc(16 * N);   /* exactly n instructions: ASan sees any read past them */
  double duration[N], features[3 * N];
  int64_t ref[6][N], first[N], end[N];
  uint8_t is_dma[N];
  if (!insns) exit(2);
  for (int bad = 0; bad < 4; bad++) {   /* parameters outside hw_config's ranges are refused before any work */
    vta_params_t q = *p;
    if (bad == 0) q.burst_gap = 10001;
    if (bad == 1) q.bus_bytes = 0;
    if (bad == 2) q.mem[VTA_MEM_X_SIZE].width = 17;
    if (bad == 3) q.gemm[VTA_LOOP_ITER_OUT].offset = 120;   /* would straddle the instruction's end */
    uint64_t words = 0;
    clear_err();
    const int rc = vta_board_program(&q, insns, N, elem, duration, features, ref[0], ref[1], ref[2], ref[3],
                                      ref[4], ref[5], first, end, is_dma, &words, g_err, sizeof g_err);
    EXPECT(rc == VTA_ERR_ARG && g_err[0] != 0x5a, "board program: bad parameters %d: rc=%d", bad, rc);
  }
  for (unsigned trial = 0; trial < 400; trial++) {
    const uint64_t n = rnd(N + 1);
    uint8_t *stream = insns + 16 * (N - n);   /* the buffer's last n instructions */
    for (uint64_t i = 0; i < 16 * n; i++) stream[i] = (uint8_t)next64();
    for (uint64_t i = 0; i < n; i++) {   /* mostly real opcodes, and dependency flags half the time */
      if (chance(80)) stream[16 * i] = (uint8_t)((stream[16 * i] & ~7u) | rnd(5));
      if (chance(50)) stream[16 * i] &= (uint8_t)~0x78u;
    }
    uint64_t words = 7;
    for (uint64_t i = 0; i < n; i++) ref[0][i] = ref[5][i] = -7;
    clear_err();
    const int rc = vta_board_program(p, stream, n, elem, duration, features, ref[0],
                                      ref[1], ref[2], ref[3], ref[4], ref[5], first, end, is_dma, &words, g_err,
                                      sizeof g_err);
    EXPECT(rc == VTA_OK || (rc == VTA_ERR_ARG && g_err[0] != 0x5a), "board program: rc=%d", rc);
    if (rc != VTA_OK) continue;
    int64_t bytes = -1;   /* the DMA ranges it read, and random ones (negative starts refused) */
    EXPECT(vta_dma_footprint(n, first, end, is_dma, &bytes) == VTA_OK, "footprint of a board program refused");
    for (uint64_t i = 0; i < n; i++) first[i] = chance(5) ? -1 - (int64_t)rnd(99) : (int64_t)(next64() >> (17 + rnd(47)));
    for (uint64_t i = 0; i < n; i++) end[i] = first[i] + (int64_t)rnd(1 << 20) - 512;
    const int fp = vta_dma_footprint(n, first, end, is_dma, &bytes);
    EXPECT(fp == VTA_OK || fp == VTA_ERR_ARG, "footprint: rc=%d", fp);
    for (uint64_t i = 0; i < n; i++) {
      int ok = duration[i] >= 1.0 && is_dma[i] <= 1;
      for (int r = 0; r < 6; r++) ok &= ref[r][i] >= -1 && ref[r][i] < (int64_t)n && ref[r][i] != (int64_t)i;
      EXPECT(ok, "board program: instruction %llu of %llu has a bad duration or reference", (unsigned long long)i,
             (unsigned long long)n);
    }
  }
  free(insns);
}

/* Into the digest: every SRAM (raw element bytes) and every mapped DRAM region of `c`. */
static void digest_state(ctx_t *c) {
  const char *saved = g_phase;
  g_phase = "digest";
  for (uint32_t mem = MEM_UOP; mem <= MEM_OUT; mem++) { /* the output buffer as a STORE would read it too */
    const uint32_t depth = sram_depth(c, mem);
    const size_t n = (size_t)depth * sram_elem(c, mem);
    uint8_t *buf = malloc(n);
    if (!buf) exit(2);
    clear_err();
    int rc = vta_sim_sram(c->sim, mem, 0, depth, buf, 0, g_err, sizeof g_err);
    EXPECT(rc == VTA_OK, "%s: reading SRAM %u for the digest: %s", c->name, mem, g_err);
    digest_u64(mem);
    digest_bytes(buf, n);
    free(buf);
  }
  for (int i = 0; i < c->nreg; i++) {
    const region_t *r = &c->reg[i];
    uint8_t *buf = malloc((size_t)r->size);
    if (!buf) exit(2);
    clear_err();
    int rc = vta_sim_read(c->sim, r->base, buf, r->size, g_err, sizeof g_err);
    EXPECT(rc == VTA_OK, "%s: reading region 0x%llx for the digest: %s", c->name, (unsigned long long)r->base, g_err);
    digest_u64(r->base);
    digest_bytes(buf, (size_t)r->size);
    free(buf);
  }
  g_phase = saved;
}

/* Where size_t is narrower than DRAM addresses (a 32-bit host, as a Pynq board's ARM), a region larger than the
 * address space is refused as out of host memory, and nothing is mapped (a truncated size would map a short
 * buffer that later accesses overrun). A 64-bit host may well map these, so they are asked only on 32 bits;
 * they are not counted among the API calls, whose counts every build prints alike. */
static void huge_maps(ctx_t *c) {
#if SIZE_MAX < UINT64_MAX
  g_phase = "huge-map";
  const uint64_t sizes[] = {(uint64_t)SIZE_MAX + 1, (uint64_t)SIZE_MAX + 1 + PAGE, (uint64_t)1 << 40};
  const uint64_t addr = (uint64_t)1 << 44; /* far above the regions the driver maps */
  for (int k = 0; k < 3; k++) {
    clear_err();
    int rc = vta_sim_map(c->sim, addr, sizes[k], g_err, sizeof g_err);
    check_message(rc, "vta_sim_map");
    EXPECT(rc == VTA_ERR_ARG, "%s: map of %llu bytes on a %u-bit host returned %s", c->name,
           (unsigned long long)sizes[k], (unsigned)(8 * sizeof(size_t)), rc_name(rc));
    if (rc == VTA_OK) vta_sim_unmap(c->sim, addr, g_err, sizeof g_err);
    uint8_t byte;
    EXPECT(vta_sim_read(c->sim, addr, &byte, 1, g_err, sizeof g_err) == VTA_ERR_MEM,
           "%s: a refused map left something mapped", c->name);
  }
#else
  (void)c;
#endif
}

/* Weight layouts cached per DRAM region (vta_sim.c, region_t): weight tiles loaded from a region, the region then
 * written, loaded again elsewhere in the SRAM (its layouts rebuilt) and unmapped, must still hold what the first
 * LOAD read: a GEMM on them afterwards gives the sums worked out here (a stale or freed layout would not, and ASan
 * reports the use after free). */
static void weight_cache_probe(ctx_t *c) {
  g_phase = "weight-cache";
  const uint32_t bo = c->p.block_out, bi = c->p.block_in, batch = c->p.batch, we = c->wgt_elem;
  enum { TILES = 4 };
  if (c->p.wgt_depth < 2 * TILES || c->p.uop_depth < TILES || c->p.acc_depth < 1 || c->p.inp_depth < 1) return;
  const uint64_t addr = round_up((uint64_t)1 << 28, we); /* above the driver's low pages, below the top of the space */
  const uint64_t size = round_up((uint64_t)TILES * we, PAGE);
  if (do_map(c, addr, size) != VTA_OK) return;
  int8_t *w = malloc((size_t)TILES * we), *w2 = malloc((size_t)TILES * we), *x = malloc(c->inp_elem);
  int8_t *got = malloc((size_t)TILES * we);
  int32_t *acc = malloc(c->acc_elem);
  uint32_t uop[TILES];
  if (!w || !w2 || !x || !got || !acc) exit(2);
  for (uint32_t i = 0; i < TILES * we; i++) w[i] = (int8_t)next64();
  for (uint32_t i = 0; i < TILES * we; i++) w2[i] = (int8_t)(w[i] ^ (int8_t)(1 + rnd(127)));
  for (uint32_t i = 0; i < c->inp_elem; i++) x[i] = (int8_t)rnd(128); /* unsigned: the quad kernels */
  memset(acc, 0, c->acc_elem);
  for (uint32_t k = 0; k < TILES; k++) {
    uint64_t u[2] = {0, 0};
    put(u, c->p.uop[VTA_UOP_WGT], k);
    uop[k] = (uint32_t)u[0];
  }
  do_sram(c, MEM_UOP, 0, TILES, (uint8_t *)uop, 1);
  do_sram(c, MEM_INP, 0, 1, (uint8_t *)x, 1);
  do_sram(c, MEM_ACC, 0, 1, (uint8_t *)acc, 1);
  do_write(c, addr, (const uint8_t *)w, (uint64_t)TILES * we);
  uint8_t prog[2 * 16];
  uint64_t q[2];
  vta_stats_t st;
  for (int step = 0; step < 3; step++) { /* LOAD into tiles 0.., write the DRAM, LOAD into tiles TILES.., GEMM */
    if (step == 1) do_write(c, addr, (const uint8_t *)w2, (uint64_t)TILES * we);
    if (step < 2) {
      encode_mem(c, q, OP_LOAD, MEM_WGT, step ? TILES : 0, addr / we, 1, TILES, TILES, 0, 0);
    } else {
      do_unmap(c, addr);
      q[0] = q[1] = 0;
      put(q, c->p.gemm[VTA_LOOP_OPCODE], OP_GEMM);
      put(q, c->p.gemm[VTA_LOOP_UOP_END], TILES);
      put(q, c->p.gemm[VTA_LOOP_ITER_OUT], 1);
      put(q, c->p.gemm[VTA_LOOP_ITER_IN], 1);
    }
    emit(prog, q);
    finish_insn(c, prog + 16);
    clear_err();
    int rc = vta_sim_run(c->sim, prog, 2, 1, 1000000, NO_WORK_LIMIT, &st, NULL, g_err, sizeof g_err);
    count_api(rc);
    digest_run(rc, &st);
    EXPECT(rc == VTA_OK, "%s: weight-cache probe step %d: %s: %s", c->name, step, rc_name(rc), g_err);
  }
  do_sram(c, MEM_ACC, 0, 1, (uint8_t *)acc, 0);
  int ok = 1;
  for (uint32_t b = 0; b < batch; b++)
    for (uint32_t o = 0; o < bo; o++) {
      uint32_t sum = 0; /* int32 wrap-around, computed without signed overflow */
      for (uint32_t k = 0; k < TILES; k++)
        for (uint32_t i = 0; i < bi; i++)
          sum += (uint32_t)((int32_t)x[b * bi + i] * (int32_t)w[(size_t)k * we + (size_t)o * bi + i]);
      ok &= (uint32_t)acc[b * bo + o] == sum;
    }
  EXPECT(ok, "%s: weight-cache probe: a GEMM after the DRAM write and unmap did not read the loaded weights", c->name);
  do_sram(c, MEM_WGT, 0, TILES, (uint8_t *)got, 0);
  EXPECT(memcmp(got, w, (size_t)TILES * we) == 0, "%s: weight-cache probe: the weight SRAM changed", c->name);
  do_sram(c, MEM_WGT, TILES, TILES, (uint8_t *)got, 0);
  EXPECT(memcmp(got, w2, (size_t)TILES * we) == 0, "%s: weight-cache probe: the second LOAD", c->name);
  free(w);
  free(w2);
  free(x);
  free(got);
  free(acc);
}

/* vta_sim_run_batch misused (no failed-index buffer, no items or stats, a copy from NULL or outside the mapped
 * regions, a stream from NULL, a random program among good items): the code and message of the first failing item,
 * its index, and the items before it done; then a good batch (a copy, the known-good LOAD ACC -> STORE stream)
 * stores the copied bytes. */
static void batch_probe(ctx_t *c) {
  g_phase = "batch";
  const uint32_t ea = c->acc_elem, eo = c->out_elem;
  const uint64_t in_addr = round_up(GOOD_BASE, ea), out_addr = round_up(GOOD_BASE + GOOD_SIZE / 2, eo);
  uint8_t in[4096], prog[3 * 16], junk[MAX_INSNS * 16];
  for (uint32_t i = 0; i < ea; i++) in[i] = (uint8_t)next64();
  uint64_t w[2];
  encode_mem(c, w, OP_LOAD, MEM_ACC, 0, in_addr / ea, 1, 1, 1, 0, 1);
  emit(prog, w);
  encode_mem(c, w, OP_STORE, MEM_OUT, 0, out_addr / eo, 1, 1, 1, 1, 0);
  emit(prog + 16, w);
  finish_insn(c, prog + 32);
  int must_fail = 0;
  const uint32_t njunk = gen_program(c, junk, &must_fail);
  vta_batch_item_t items[4];
  vta_stats_t st[4];
  uint32_t failed = 12345;
  const vta_batch_item_t good = {in_addr, in, ea, prog, 3};
  const uint64_t outside = TOP48 + 4096; /* never mapped */
  struct {
    vta_batch_item_t bad;
    int rc; /* expected code, -1: whatever the random program gives */
  } cases[] = {
      {{in_addr, NULL, 8, NULL, 0}, VTA_ERR_ARG},          /* bytes from NULL */
      {{outside, in, 8, NULL, 0}, VTA_ERR_MEM},            /* a copy outside every region */
      {{in_addr, in, 0, NULL, 2}, VTA_ERR_INSN},           /* a stream from NULL */
      {{0, NULL, 0, junk, njunk}, -1},                     /* a random (maybe failing) program */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const uint32_t at = (uint32_t)rnd(3); /* the bad item after `at` good ones */
    for (uint32_t i = 0; i < at; i++) items[i] = good;
    items[at] = cases[k].bad;
    clear_err();
    failed = 12345;
    int rc = vta_sim_run_batch(c->sim, items, at + 1, 1, 1000000, NO_WORK_LIMIT, st, &failed, g_err, sizeof g_err);
    count_api(rc);
    if (rc) check_message(rc, "vta_sim_run_batch");
    if (cases[k].rc >= 0) {
      EXPECT(rc == cases[k].rc && failed == at, "%s: batch case %zu returned %s at item %u, expected %s at %u",
             c->name, k, rc_name(rc), failed, rc_name(cases[k].rc), at);
    } else {
      EXPECT(rc == VTA_OK ? failed == at + 1 : failed == at, "%s: batch of a random program: %s at item %u of %u",
             c->name, rc_name(rc), failed, at + 1);
      if (must_fail) EXPECT(rc != VTA_OK, "%s: a batch ran a program that cannot pass validation", c->name);
    }
    for (uint32_t i = 0; i < at; i++)
      EXPECT(st[i].error_index == -1 && st[i].out_store_nbytes == eo, "%s: batch item %u before the failing one did "
             "not run", c->name, i);
    if (rc) g_pending = 1;
  }
  clear_err();
  int rc = vta_sim_run_batch(c->sim, NULL, 1, 1, 1000000, NO_WORK_LIMIT, st, &failed, g_err, sizeof g_err);
  check_message(rc, "vta_sim_run_batch");
  EXPECT(rc == VTA_ERR_ARG && failed == 1, "%s: a batch without items returned %s", c->name, rc_name(rc));
  rc = vta_sim_run_batch(c->sim, &good, 1, 1, 1000000, NO_WORK_LIMIT, NULL, &failed, g_err, sizeof g_err);
  check_message(rc, "vta_sim_run_batch");
  EXPECT(rc == VTA_ERR_ARG, "%s: a batch without stats returned %s", c->name, rc_name(rc));
  rc = vta_sim_run_batch(c->sim, &good, 1, 1, 1000000, NO_WORK_LIMIT, st, NULL, g_err, sizeof g_err);
  check_message(rc, "vta_sim_run_batch");
  EXPECT(rc == VTA_ERR_ARG, "%s: a batch without a failed-index buffer returned %s", c->name, rc_name(rc));
  rc = vta_sim_run_batch(c->sim, NULL, 0, 1, 1000000, NO_WORK_LIMIT, NULL, &failed, g_err, sizeof g_err);
  EXPECT(rc == VTA_OK && failed == 0, "%s: an empty batch returned %s", c->name, rc_name(rc));
  for (uint32_t i = 0; i < eo; i++) in[ea + i] = 0xcc;
  uint8_t want[1024]; /* the low byte of each lane (mirror), or output row 0 as it is (hls, chisel: LOAD leaves it) */
  for (uint32_t l = 0; l < eo; l++) want[l] = in[4 * l];
  if (c->out_mode != OUT_MIRROR) do_sram(c, MEM_OUT, 0, 1, want, 0);
  const vta_batch_item_t pair[2] = {{out_addr, in + ea, eo, NULL, 0}, good}; /* canary out, then the copy */
  rc = vta_sim_run_batch(c->sim, pair, 2, 1, 1000000, NO_WORK_LIMIT, st, &failed, g_err, sizeof g_err);
  count_api(rc);
  digest_run(rc, &st[1]);
  EXPECT(rc == VTA_OK && failed == 2, "%s: a good batch returned %s: %s", c->name, rc_name(rc), g_err);
  uint8_t got[1024];
  if (do_read(c, out_addr, got, eo) == VTA_OK) {
    EXPECT(memcmp(got, want, eo) == 0, "%s: a good batch stored the wrong bytes (output mode %d)", c->name,
           c->out_mode);
  }
}

/* Sets `c`'s simulator to output-buffer mode `mode` (strict: refuse a STORE of a detached row); must succeed. */
static void set_out_mode(ctx_t *c, int mode, int strict) {
  clear_err();
  int rc = vta_sim_set_out_buffer(c->sim, mode, strict, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_set_out_buffer");
  EXPECT(rc == VTA_OK && vta_sim_out_buffer(c->sim) == mode, "%s: output mode %d (strict %d) returned %s: %s",
         c->name, mode, strict, rc_name(rc), rc ? g_err : "");
}

/* A LOAD ACC, ALU or GEMM instruction `first` (pushing to store) -> STORE OUT of accumulator row `row` to DRAM element
 * `out_index` (popping) -> FINISH; returns the status, checking the error index of a failure. */
static int store_after(ctx_t *c, const uint64_t first[2], uint32_t row, uint64_t out_index, int expect,
                       const char *what) {
  uint8_t prog[3 * 16];
  uint64_t w[2];
  emit(prog, first);
  encode_mem(c, w, OP_STORE, MEM_OUT, row, out_index, 1, 1, 1, 1, 0);
  emit(prog + 16, w);
  finish_insn(c, prog + 32);
  vta_stats_t st;
  clear_err();
  int rc = vta_sim_run(c->sim, prog, 3, 1, 1000000, NO_WORK_LIMIT, &st, NULL, g_err, sizeof g_err);
  count_api(rc);
  digest_run(rc, &st);
  check_message(rc, "vta_sim_run");
  EXPECT(rc == expect, "%s: output mode %d, %s: returned %s, expected %s (%s)", c->name, vta_sim_out_buffer(c->sim),
         what, rc_name(rc), rc_name(expect), rc ? g_err : "");
  if (rc == expect && rc != VTA_OK)
    EXPECT(st.error_index == 1, "%s: %s: refused at instruction %lld, expected the STORE (1)", c->name, what,
           (long long)st.error_index);
  return rc;
}

/* What each output-buffer mode stores (docs/simulator.md, "The output buffer"), worked out here, on one accumulator
 * row r of the known-good region, in a mode picked at random, strict or not:
 *   LOAD ACC then STORE: mirror stores the loaded lanes' low bytes; hls and chisel what the row's output copy held
 *     (the host's SRAM write of the row set it); strict hls/chisel refuse the STORE (the row is detached);
 *   ALU ADD imm then STORE: every mode stores low(acc + imm);
 *   GEMM with reset then STORE: mirror stores 0; hls low(acc + sum of inp * wgt), the sum it computed before
 *     zeroing; chisel the copy as the ALU left it; strict hls/chisel refuse it. The accumulator row is 0 in every mode.
 * A mode outside 0..2 is refused with a message and changes nothing. The context's own mode is restored after. */
static void out_buffer_probe(ctx_t *c) {
  g_phase = "out-buffer";
  static const int bad_modes[] = {-1, 3, 4, 1000, INT_MAX, INT_MIN};
  const int bad = bad_modes[rnd(6)];
  clear_err();
  int rc = vta_sim_set_out_buffer(c->sim, bad, 0, g_err, sizeof g_err);
  count_api(rc);
  check_message(rc, "vta_sim_set_out_buffer");
  EXPECT(rc == VTA_ERR_ARG && vta_sim_out_buffer(c->sim) == c->out_mode, "%s: output mode %d returned %s (mode now %d)",
         c->name, bad, rc_name(rc), vta_sim_out_buffer(c->sim));

  const uint32_t ea = c->acc_elem, eo = c->out_elem, lanes = c->p.batch * c->p.block_out;
  const uint32_t bi = c->p.block_in, bo = c->p.block_out;
  const uint64_t in_addr = round_up(GOOD_BASE, ea), out_addr = round_up(GOOD_BASE + GOOD_SIZE / 2, eo);
  const int mode = (int)rnd(OUT_MODES);
  const int strict = (int)rnd(2);
  const int refuses = strict && mode != OUT_MIRROR; /* a detached row exists only outside mirror */
  const uint32_t r = (uint32_t)rnd(c->p.acc_depth), i = (uint32_t)rnd(c->p.inp_depth), k = (uint32_t)rnd(c->p.wgt_depth);
  const uint32_t imm = (uint32_t)rnd(16);
  if (lanes > 1024 || c->inp_elem > 4096 || c->wgt_elem > 4096) return;
  uint32_t old[1024], loaded[1024], sum[1024];
  int8_t x[4096], wt[4096];
  for (uint32_t l = 0; l < lanes; l++) old[l] = (uint32_t)next64();
  for (uint32_t l = 0; l < lanes; l++) loaded[l] = (uint32_t)next64();
  for (uint32_t j = 0; j < c->inp_elem; j++) x[j] = (int8_t)next64();
  for (uint32_t j = 0; j < c->wgt_elem; j++) wt[j] = (int8_t)next64();
  for (uint32_t b = 0; b < c->p.batch; b++)
    for (uint32_t o = 0; o < bo; o++) {
      uint32_t t = 0; /* int32 wrap-around without signed overflow */
      for (uint32_t j = 0; j < bi; j++) t += (uint32_t)((int32_t)x[b * bi + j] * (int32_t)wt[o * bi + j]);
      sum[b * bo + o] = t;
    }
  set_out_mode(c, mode, strict);
  if (do_sram(c, MEM_ACC, r, 1, (uint8_t *)old, 1) || do_sram(c, MEM_INP, i, 1, (uint8_t *)x, 1) ||
      do_sram(c, MEM_WGT, k, 1, (uint8_t *)wt, 1) || do_write(c, in_addr, (const uint8_t *)loaded, ea))
    goto restore;

  uint8_t canary[1024], got[1024], want[1024];
  uint32_t acc[1024];
  memset(canary, 0xa5, eo);
  uint64_t w[2];
  /* 1: LOAD ACC, STORE */
  if (do_write(c, out_addr, canary, eo)) goto restore;
  encode_mem(c, w, OP_LOAD, MEM_ACC, r, in_addr / ea, 1, 1, 1, 0, 1);
  store_after(c, w, r, out_addr / eo, refuses ? VTA_ERR_INSN : VTA_OK, "LOAD ACC then STORE");
  for (uint32_t l = 0; l < eo; l++) want[l] = refuses ? 0xa5 : (uint8_t)(mode == OUT_MIRROR ? loaded[l] : old[l]);
  if (do_read(c, out_addr, got, eo) == VTA_OK)
    EXPECT(memcmp(got, want, eo) == 0, "%s: output mode %d (strict %d): LOAD ACC then STORE stored the wrong bytes",
           c->name, mode, strict);
  if (do_sram(c, MEM_ACC, r, 1, (uint8_t *)acc, 0) == VTA_OK)
    EXPECT(memcmp(acc, loaded, ea) == 0, "%s: output mode %d: the LOADed accumulator row differs", c->name, mode);
  /* 2: ALU ADD imm, STORE (micro-op 0: dst r, src r) */
  uint64_t u[2] = {0, 0};
  put(u, c->p.uop[VTA_UOP_DST], r);
  put(u, c->p.uop[VTA_UOP_SRC], r);
  uint32_t u32 = (uint32_t)u[0];
  if (do_sram(c, MEM_UOP, 0, 1, (uint8_t *)&u32, 1) || do_write(c, out_addr, canary, eo)) goto restore;
  w[0] = w[1] = 0;
  put(w, c->p.alu[VTA_LOOP_OPCODE], OP_ALU);
  put(w, c->p.alu[VTA_LOOP_PUSH_NEXT], 1);
  put(w, c->p.alu[VTA_LOOP_UOP_END], 1);
  put(w, c->p.alu[VTA_LOOP_ITER_OUT], 1);
  put(w, c->p.alu[VTA_LOOP_ITER_IN], 1);
  put(w, c->p.alu[VTA_ALU_OPCODE], ALU_ADD);
  put(w, c->p.alu[VTA_ALU_USE_IMM], 1);
  put(w, c->p.alu[VTA_ALU_IMM], imm);
  store_after(c, w, r, out_addr / eo, VTA_OK, "ALU ADD then STORE");
  for (uint32_t l = 0; l < eo; l++) want[l] = (uint8_t)(loaded[l] + imm);
  if (do_read(c, out_addr, got, eo) == VTA_OK)
    EXPECT(memcmp(got, want, eo) == 0, "%s: output mode %d: ALU ADD then STORE stored the wrong bytes", c->name, mode);
  /* 3: GEMM with reset, STORE (micro-op 0: dst r, src i, wgt k) */
  put(u, c->p.uop[VTA_UOP_SRC], i);
  put(u, c->p.uop[VTA_UOP_WGT], k);
  u32 = (uint32_t)u[0];
  if (do_sram(c, MEM_UOP, 0, 1, (uint8_t *)&u32, 1) || do_write(c, out_addr, canary, eo)) goto restore;
  w[0] = w[1] = 0;
  put(w, c->p.gemm[VTA_LOOP_OPCODE], OP_GEMM);
  put(w, c->p.gemm[VTA_LOOP_PUSH_NEXT], 1);
  put(w, c->p.gemm[VTA_LOOP_RESET], 1);
  put(w, c->p.gemm[VTA_LOOP_UOP_END], 1);
  put(w, c->p.gemm[VTA_LOOP_ITER_OUT], 1);
  put(w, c->p.gemm[VTA_LOOP_ITER_IN], 1);
  store_after(c, w, r, out_addr / eo, refuses ? VTA_ERR_INSN : VTA_OK, "GEMM reset then STORE");
  for (uint32_t l = 0; l < eo; l++) {
    const uint32_t before = loaded[l] + imm;
    want[l] = refuses ? 0xa5 : (uint8_t)(mode == OUT_MIRROR ? 0 : mode == OUT_HLS ? before + sum[l] : before);
  }
  if (do_read(c, out_addr, got, eo) == VTA_OK)
    EXPECT(memcmp(got, want, eo) == 0, "%s: output mode %d (strict %d): GEMM reset then STORE stored the wrong bytes",
           c->name, mode, strict);
  if (do_sram(c, MEM_ACC, r, 1, (uint8_t *)acc, 0) == VTA_OK) {
    int zero = 1;
    for (uint32_t l = 0; l < lanes; l++) zero &= acc[l] == 0;
    EXPECT(zero, "%s: output mode %d: a reset GEMM left a nonzero accumulator", c->name, mode);
  }
restore:
  set_out_mode(c, c->out_mode, 0);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PARAMS_FILE ITERATIONS SEED\n", argv[0]);
    return 2;
  }
  vta_params_t base;
  if (!read_params(argv[1], &base)) return 2;
  unsigned long iterations = strtoul(argv[2], NULL, 10);
  uint64_t seed = strtoull(argv[3], NULL, 10);
  g_rng = (seed ^ UINT64_C(0x9E3779B97F4A7C15)) * UINT64_C(0xBF58476D1CE4E5B9) | 1; /* never zero */
  for (int i = 0; i < 8; i++) next64();

  bad_params(&base);
  hostile_board_times();
  hostile_board_program(&base);
  static ctx_t ctx[NCTX];
  static const char *const names[NCTX] = {"preset", "variant1", "variant2", "variant3"};
  g_phase = "create";
  const int first_mode = (int)rnd(OUT_MODES); /* the contexts' output modes: all three among the first three */
  ctx_init(&ctx[0], names[0], &base, first_mode);
  for (int i = 1; i < NCTX; i++) {
    vta_params_t p = base;
    shrink(&p);
    if (i == 1) { /* the vectorised GEMM path (BLOCK_OUT a multiple of 16) with an odd BLOCK_IN */
      p.block_out = chance(50) ? 16 : 32;
      p.block_in = 1 + 2 * (uint32_t)rnd(16);
    }
    ctx_init(&ctx[i], names[i], &p, (first_mode + i) % OUT_MODES);
  }
  huge_maps(&ctx[0]);
  for (int i = 0; i < NCTX; i++) weight_cache_probe(&ctx[i]);

  for (g_iter = 0; g_iter < iterations; g_iter++) {
    ctx_t *c = &ctx[chance(70) ? 0 : 1 + rnd(NCTX - 1)];
    g_phase = "pool";
    if (c->nreg < 3 || chance(25)) pool_map_random(c);
    settle(c, "a pool error");
    g_phase = "sram";
    random_sram_state(c);
    settle(c, "an SRAM error");
    run_random_program(c);
    settle(c, "a failing program");
    if (chance(60)) misuse(c);
    settle(c, "an API error");
    if (chance(40)) probe(c);
    settle(c, "a probe");
    if (chance(5)) batch_probe(c);
    settle(c, "a batch");
    if (chance(5)) out_buffer_probe(c);
    settle(c, "an output-buffer probe");
    if (chance(2)) { /* another output mode for this simulator from now on */
      c->out_mode = (int)rnd(OUT_MODES);
      set_out_mode(c, c->out_mode, 0);
    }
    if (g_iter % 256 == 255) known_good(c, "a batch of iterations");
    if (g_iter % DIGEST_EVERY == DIGEST_EVERY - 1) digest_state(c);
  }
  for (int i = 0; i < NCTX; i++) {
    digest_state(&ctx[i]);
    vta_sim_destroy(ctx[i].sim);
  }

  printf("hostile: %lu programs: ok=%llu, insn=%llu, mem=%llu, deadlock=%llu, budget=%llu, arg=%llu, work=%llu, "
         "other=%llu\n", iterations, prog_rc[0], prog_rc[1], prog_rc[2], prog_rc[3], prog_rc[4], prog_rc[5],
         prog_rc[6], prog_rc[7]);
  printf("hostile: api calls: ok=%llu, insn=%llu, mem=%llu, deadlock=%llu, budget=%llu, arg=%llu, work=%llu, "
         "other=%llu\n", api_rc[0], api_rc[1], api_rc[2], api_rc[3], api_rc[4], api_rc[5], api_rc[6], api_rc[7]);
  printf("hostile: clean-biased programs: ok=%llu, insn=%llu, mem=%llu, deadlock=%llu, budget=%llu, work=%llu; "
         "instructions executed=%llu, gemm uops=%llu, alu uops=%llu\n", clean_rc[0], clean_rc[1], clean_rc[2],
         clean_rc[3], clean_rc[4], clean_rc[6], executed, gemm_ops, alu_ops);
  printf("hostile: known-good checks after an error: %llu\n", g_known_good);
  printf("hostile: digest %016llx\n", (unsigned long long)g_digest);
  printf("%llu passed, %llu failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
