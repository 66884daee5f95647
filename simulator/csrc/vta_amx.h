/* The AMX GEMM kernel path (docs/simulator.md, "Kernel paths"): its kernels, compiled twice from one source
 * (vta_amx_kernels.h) — vta_amx_native.c over the real tile instructions (TDPBSSD & co., the AMX target enabled in
 * that translation unit only), vta_amx_emulated.c over a portable C model of the same instructions — and the
 * CPU / OS check that decides whether the native path may run. */
#ifndef VTA_AMX_H
#define VTA_AMX_H

#include <stddef.h>
#include <stdint.h>

/* The 64-byte tile configuration (LDTILECFG's palette-1 format) the kernels below expect for a block shape:
 * 16x16 blocks (any batch) run micro-ops 16 at a time (vta_amx_rows_*), other shapes one micro-op per call
 * (vta_amx_gemm_*). Plain C: vta_sim.c builds it once per simulator. */
void vta_amx_config(uint8_t cfg[64], uint32_t block_out, uint32_t block_in, uint32_t batch);

/* NULL when the native kernels may run: this CPU has AMX-TILE and AMX-INT8, the OS enables their state (XCR0)
 * and grants this process the right to use it (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA));
 * otherwise why not, in a few words (also on non-x86-64 or non-Linux hosts). Asks the OS once per process. */
const char *vta_amx_refusal(void);

/* One set of kernels (suffix native or emulated), all over the quad layout of the weight tiles (words (k, o) =
 * w[o][4k .. 4k + 3], rows of 4 * BLOCK_OUT bytes: TDPBSSD's B operand as it is):
 * - enter loads the tile configuration on the calling thread (LDTILECFG), leave releases the tiles (TILERELEASE);
 *   every thread brackets its share of a GEMM with them (vta_sim.c, gemm_part), so the configuration is the
 *   thread's own and no tile state outlives the share (another library's AMX code may run between GEMMs);
 * - rows: a gemm_row_fn for 16x16 blocks (vta_sim.c): n micro-ops per row, `rows` rows, steps in int32 lanes
 *   (acc) and bytes (inp), signed inputs and weights (TDPBSSD), int32 sums wrapping;
 * - tiles: the same over `ntiles` inner-loop iterations that add into the same accumulators (gemm_tiles_fn);
 * - gemm: one micro-op of any block shape (gemm_fn). */
#define VTA_AMX_DECLARE(sfx)                                                                                       \
  void vta_amx_enter_##sfx(const uint8_t *cfg);                                                                    \
  void vta_amx_leave_##sfx(void);                                                                                  \
  void vta_amx_rows_##sfx(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,       \
                          ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch);         \
  void vta_amx_tiles_##sfx(int32_t *acc, ptrdiff_t dstep, ptrdiff_t drow, const int8_t *inp, ptrdiff_t sstep,      \
                           ptrdiff_t srow, const uint8_t *tile, uint32_t n, uint32_t rows, uint32_t batch,         \
                           uint32_t ntiles, ptrdiff_t inp_iter, ptrdiff_t tile_iter);                              \
  void vta_amx_gemm_##sfx(int32_t *acc, const int8_t *inp, const uint8_t *tile, uint32_t batch, uint32_t bo,       \
                          uint32_t bi);

VTA_AMX_DECLARE(native)
VTA_AMX_DECLARE(emulated)

/* The tiles the kernels use: accumulators, inputs, and up to four weight tiles (fused iterations). */
#define VTA_AMX_TILE_C 0
#define VTA_AMX_TILE_A 1
#define VTA_AMX_TILE_B 2
#define VTA_AMX_GROUP 4

#endif
