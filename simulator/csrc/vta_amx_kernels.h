/* The AMX kernels' one source, included by vta_amx_native.c (the real instructions) and vta_amx_emulated.c (their
 * portable C model), which define first:
 *   AMX_SFX                      native or emulated (the functions' suffix, vta_amx.h)
 *   TILE_CONFIG(cfg)             LDTILECFG of the 64 bytes at cfg
 *   TILE_RELEASE()               TILERELEASE
 *   TILE_LOAD(t, base, stride)   TILELOADD tmm<t>: rows of the tile's colsb bytes from base + r * stride (bytes)
 *   TILE_STORE(t, base, stride)  TILESTORED tmm<t>
 *   TILE_ZERO(t)                 TILEZERO tmm<t>
 *   TILE_DPBSSD(c, a, b)         TDPBSSD tmm<c> += tmm<a> . tmm<b>, signed bytes, int32 sums wrapping
 * Tile numbers are literal constants (the native forms paste them into the instruction text).
 *
 * VTA's GEMM is signed int8 inputs times signed int8 weights into int32 accumulators that wrap (hw_config:
 * INP_WIDTH = WGT_WIDTH = 8, both signed), which is TDPBSSD exactly: every input sign takes the same kernel, with
 * no offset and no correction (TDPBUSD would need the avx512vnni path's +128 offset for signed inputs). A micro-op
 * is one row of the A tile (its BLOCK_IN input bytes) and one row of the C tile (its BLOCK_OUT int32 accumulators);
 * the weight tile's quad layout is the B tile (BLOCK_IN / 4 rows of 4 * BLOCK_OUT bytes). */

#include <string.h>

#define AMX_CAT2(a, b) a##_##b
#define AMX_CAT(a, b) AMX_CAT2(a, b)
#define AMX_NAME(name) AMX_CAT(name, AMX_SFX)

void AMX_NAME(vta_amx_enter)(const uint8_t *cfg) { TILE_CONFIG(cfg); }

void AMX_NAME(vta_amx_leave)(void) { TILE_RELEASE(); }

/* Weight tile g + t of a group into B tile 2 + t (t < VTA_AMX_GROUP; literal tile numbers). */
static void AMX_NAME(load_weights)(const uint8_t *tile, ptrdiff_t tile_iter, uint32_t nt) {
  TILE_LOAD(2, tile, 64);
  if (nt > 1) TILE_LOAD(3, tile + tile_iter, 64);
  if (nt > 2) TILE_LOAD(4, tile + 2 * tile_iter, 64);
  if (nt > 3) TILE_LOAD(5, tile + 3 * tile_iter, 64);
}

static void AMX_NAME(dot)(uint32_t t) {
  switch (t) {
    case 0: TILE_DPBSSD(0, 1, 2); break;
    case 1: TILE_DPBSSD(0, 1, 3); break;
    case 2: TILE_DPBSSD(0, 1, 4); break;
    default: TILE_DPBSSD(0, 1, 5); break;
  }
}

/* The micro-ops of a run (rows x n, steps in int32 lanes for acc, bytes for inp) taken in order, 16 at a time: one
 * A tile of 16 input rows and one C tile of 16 accumulator rows per block, for batch row b (offset 16 b). A block
 * whose 16 rows lie at one stride (within one row of the run, or the whole run when its rows continue each other's
 * steps) is loaded in place; otherwise (a shorter block: the run's tail; rows that jump) its input rows are
 * gathered into a buffer. Its accumulators go through C in place (load, TDPBSSD, store) when they are 16 rows at a
 * nonzero stride; otherwise C starts at zero, takes the products, and each of its rows is added to its micro-op's
 * accumulators in order, so micro-ops that share accumulators (a step of 0) add up as they do one by one.
 * `ntiles` inner-loop iterations at once (fused, dst_in 0): iteration t's inputs at + t * inp_iter, its weight tile
 * at + t * tile_iter, VTA_AMX_GROUP weight tiles resident per pass over the run. */
static void AMX_NAME(run_blocks)(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                                 ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch,
                                 uint32_t ntiles, ptrdiff_t inp_iter, ptrdiff_t tile_iter) {
  int8_t abuf[16 * 16];
  int32_t cbuf[16 * 16];
  const uint64_t total = (uint64_t)n * rows;
  const int flat_inp = rows == 1 || srow == (ptrdiff_t)n * sstep;          /* the whole run at one input stride */
  const int flat_acc = (rows == 1 || drow == (ptrdiff_t)n * dstep) && dstep; /* ... at one accumulator stride */
  for (uint32_t g = 0; g < ntiles; g += VTA_AMX_GROUP) {
    const uint32_t nt = ntiles - g < VTA_AMX_GROUP ? ntiles - g : VTA_AMX_GROUP;
    AMX_NAME(load_weights)(tile + (ptrdiff_t)g * tile_iter, tile_iter, nt);
    for (uint32_t b = 0; b < batch; b++) {
      for (uint64_t j0 = 0; j0 < total; j0 += 16) {
        const uint32_t m = total - j0 < 16 ? (uint32_t)(total - j0) : 16;
        const uint32_t r0 = (uint32_t)(j0 / n), i0 = (uint32_t)(j0 % n);
        const int one_row = i0 + m <= n;
        const int direct_acc = m == 16 && (flat_acc || (one_row && dstep));
        const int direct_inp = m == 16 && (flat_inp || one_row);
        int32_t *const a0 = acc + (ptrdiff_t)r0 * drow + (ptrdiff_t)i0 * dstep + 16 * (ptrdiff_t)b;
        const int8_t *const x0 = inp + (ptrdiff_t)r0 * srow + (ptrdiff_t)i0 * sstep + 16 * (ptrdiff_t)b +
                                 (ptrdiff_t)g * inp_iter;
        if (direct_acc)
          TILE_LOAD(0, a0, dstep * 4);
        else
          TILE_ZERO(0);
        for (uint32_t t = 0; t < nt; t++) {
          const int8_t *const xt = x0 + (ptrdiff_t)t * inp_iter;
          if (direct_inp) {
            TILE_LOAD(1, xt, sstep);
          } else {
            uint32_t r = r0, i = i0;
            for (uint32_t j = 0; j < 16; j++) {
              if (j < m) {
                memcpy(abuf + 16 * j, inp + (ptrdiff_t)r * srow + (ptrdiff_t)i * sstep + 16 * (ptrdiff_t)b +
                                          (ptrdiff_t)(g + t) * inp_iter, 16);
                if (++i == n) i = 0, r++;
              } else {
                memset(abuf + 16 * j, 0, 16);
              }
            }
            TILE_LOAD(1, abuf, 16);
          }
          AMX_NAME(dot)(t);
        }
        if (direct_acc) {
          TILE_STORE(0, a0, dstep * 4);
          continue;
        }
        TILE_STORE(0, cbuf, 64);
        uint32_t r = r0, i = i0;
        for (uint32_t j = 0; j < m; j++) {
          int32_t *const a = acc + (ptrdiff_t)r * drow + (ptrdiff_t)i * dstep + 16 * (ptrdiff_t)b;
          for (int o = 0; o < 16; o++) a[o] = (int32_t)((uint32_t)a[o] + (uint32_t)cbuf[16 * j + o]);
          if (++i == n) i = 0, r++;
        }
      }
    }
  }
}

void AMX_NAME(vta_amx_rows)(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                            ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch) {
  AMX_NAME(run_blocks)(acc, dstep, drow, inp, sstep, srow, tile, n, rows, batch, 1, 0, 0);
}

void AMX_NAME(vta_amx_tiles)(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,
                             ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch,
                             uint32_t ntiles, ptrdiff_t inp_iter, ptrdiff_t tile_iter) {
  AMX_NAME(run_blocks)(acc, dstep, drow, inp, sstep, srow, tile, n, rows, batch, ntiles, inp_iter, tile_iter);
}

/* One micro-op of any block shape (BATCH <= 16, BLOCK_IN <= 64: vta_sim.c's parameter limits): A is the micro-op's
 * BATCH input rows (in place where BLOCK_IN is a multiple of 4, else copied with zeros up to one), C its
 * accumulators and B the weights' quad rows, sixteen outputs at a time (vta_amx_config's tile shapes). A last group
 * of fewer than sixteen outputs (BLOCK_OUT > 16 and not a multiple of it: the C API allows any shape) goes through
 * copies of its accumulators and weight columns, zero-padded to the tiles' sixteen. */
void AMX_NAME(vta_amx_gemm)(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo,
                            uint32_t bi) {
  int8_t abuf[16 * 64];
  int32_t cbuf[16 * 16], bbuf[16 * 16];
  const uint32_t k4 = (bi + 3) / 4;
  if (bi % 4) {
    for (uint32_t b = 0; b < batch; b++) {
      memset(abuf + 64 * b, 0, 64);
      memcpy(abuf + 64 * b, inp + (size_t)b * bi, bi);
    }
    TILE_LOAD(1, abuf, 64);
  } else {
    TILE_LOAD(1, inp, (ptrdiff_t)bi);
  }
  for (uint32_t o = 0; o < bo; o += 16) {
    const uint32_t nout = bo - o < 16 ? bo - o : 16;
    if (bo <= 16 || nout == 16) { /* the tiles' width: in place */
      TILE_LOAD(0, acc + o, 4 * (ptrdiff_t)bo);
      TILE_LOAD(2, tile + 4 * (size_t)o, 4 * (ptrdiff_t)bo);
      TILE_DPBSSD(0, 1, 2);
      TILE_STORE(0, acc + o, 4 * (ptrdiff_t)bo);
      continue;
    }
    memset(cbuf, 0, sizeof cbuf);
    memset(bbuf, 0, sizeof bbuf);
    for (uint32_t b = 0; b < batch; b++) memcpy(cbuf + 16 * b, acc + (size_t)b * bo + o, 4 * nout);
    for (uint32_t k = 0; k < k4; k++) memcpy(bbuf + 16 * k, tile + 4 * ((size_t)k * bo + o), 4 * nout);
    TILE_LOAD(0, cbuf, 64);
    TILE_LOAD(2, bbuf, 64);
    TILE_DPBSSD(0, 1, 2);
    TILE_STORE(0, cbuf, 64);
    for (uint32_t b = 0; b < batch; b++) memcpy(acc + (size_t)b * bo + o, cbuf + 16 * b, 4 * nout);
  }
}
