/* The AMX kernels (vta_amx_kernels.h) over a portable C model of the tile instructions they use, so that the
 * kernels' blocking, strides, staging and per-thread configuration are checked bit for bit on any CPU
 * (VTA_SIM_KERNEL=amx-emulated; docs/simulator.md, "Kernel paths"). The model follows Intel's definitions (SDM
 * vol. 2, LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TILERELEASE, TDPBSSD): per-thread state of eight tiles of up
 * to 16 rows x 64 bytes and their configured rows / colsb; a load fills the configured rows and columns and zeroes
 * the rest; TDPBSSD adds, for each of C's rows and 32-bit columns, the four products of signed bytes of A's row and
 * B's rows, in int32 wrapping (no saturation). Where the hardware would fault (#UD, #GP: a tile used before
 * LDTILECFG or after TILERELEASE on this thread, shapes that do not fit), the model prints which and aborts, as
 * the fault would end the process: it is a bug in the kernels, which the tests must see. It cannot check the real
 * instructions' encoding or the OS permission request (vta_amx_native.c): only an AMX machine runs those. */
#define _POSIX_C_SOURCE 200112L
#include "vta_amx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define THREAD_LOCAL __thread
#else
#define THREAD_LOCAL _Thread_local
#endif

typedef struct tile_state {
  uint8_t palette;   /* 0: not configured (initial, or after TILERELEASE) */
  uint8_t rows[8];
  uint16_t colsb[8];
  uint8_t data[8][16][64];
} tile_state_t;

static THREAD_LOCAL tile_state_t tmm; /* tile registers are per thread, like the hardware's */

static void tile_fault(const char *insn, const char *why) {
  fprintf(stderr, "amx-emulated: %s faults: %s\n", insn, why);
  abort();
}

static void emu_config(const uint8_t *cfg) {
  if (cfg[0] == 0) { /* palette 0: back to the initial state */
    memset(&tmm, 0, sizeof tmm);
    return;
  }
  if (cfg[0] != 1) tile_fault("LDTILECFG", "palette other than 0 or 1");
  for (int i = 1; i < 16; i++)
    if (cfg[i]) tile_fault("LDTILECFG", "start_row or reserved bytes 2-15 not zero");
  memset(&tmm, 0, sizeof tmm);
  tmm.palette = 1;
  for (int t = 0; t < 8; t++) {
    tmm.colsb[t] = (uint16_t)(cfg[16 + 2 * t] | cfg[17 + 2 * t] << 8);
    tmm.rows[t] = cfg[48 + t];
    if (tmm.rows[t] > 16 || tmm.colsb[t] > 64) tile_fault("LDTILECFG", "a tile larger than 16 rows x 64 bytes");
    if (!tmm.rows[t] != !tmm.colsb[t]) tile_fault("LDTILECFG", "a tile with rows but no columns, or the reverse");
  }
  for (int i = 32; i < 48; i++)
    if (cfg[i]) tile_fault("LDTILECFG", "colsb of tiles 8-15 (reserved) not zero");
  for (int i = 56; i < 64; i++)
    if (cfg[i]) tile_fault("LDTILECFG", "rows of tiles 8-15 (reserved) not zero");
}

static void need_tile(const char *insn, int t) {
  if (!tmm.palette) tile_fault(insn, "no tile configuration on this thread (LDTILECFG missing, or after TILERELEASE)");
  if (!tmm.rows[t]) tile_fault(insn, "the tile is not configured");
}

static void emu_load(int t, const void *base, ptrdiff_t stride) {
  need_tile("TILELOADD", t);
  memset(tmm.data[t], 0, sizeof tmm.data[t]);
  for (int r = 0; r < tmm.rows[t]; r++) memcpy(tmm.data[t][r], (const uint8_t *)base + r * stride, tmm.colsb[t]);
}

static void emu_store(int t, void *base, ptrdiff_t stride) {
  need_tile("TILESTORED", t);
  for (int r = 0; r < tmm.rows[t]; r++) memcpy((uint8_t *)base + r * stride, tmm.data[t][r], tmm.colsb[t]);
}

static void emu_zero(int t) {
  need_tile("TILEZERO", t);
  memset(tmm.data[t], 0, sizeof tmm.data[t]);
}

static uint32_t dword(const uint8_t *row, int i) {
  return (uint32_t)row[4 * i] | (uint32_t)row[4 * i + 1] << 8 | (uint32_t)row[4 * i + 2] << 16 |
         (uint32_t)row[4 * i + 3] << 24;
}

static void emu_dpbssd(int c, int a, int b) {
  need_tile("TDPBSSD", c);
  need_tile("TDPBSSD", a);
  need_tile("TDPBSSD", b);
  if (c == a || c == b || a == b) tile_fault("TDPBSSD", "the same tile twice");
  if (tmm.rows[c] != tmm.rows[a] || tmm.colsb[c] != tmm.colsb[b] || tmm.colsb[a] / 4 != tmm.rows[b])
    tile_fault("TDPBSSD", "tile shapes that do not fit (C rows != A rows, C colsb != B colsb or A colsb / 4 != B rows)");
  const int k4 = tmm.colsb[a] / 4, n4 = tmm.colsb[c] / 4;
  for (int m = 0; m < tmm.rows[c]; m++) {
    uint8_t *row = tmm.data[c][m];
    for (int n = 0; n < n4; n++) {
      uint32_t sum = dword(row, n);
      for (int k = 0; k < k4; k++)
        for (int i = 0; i < 4; i++)
          sum += (uint32_t)((int32_t)(int8_t)tmm.data[a][m][4 * k + i] * (int32_t)(int8_t)tmm.data[b][k][4 * n + i]);
      for (int i = 0; i < 4; i++) row[4 * n + i] = (uint8_t)(sum >> (8 * i));
    }
    memset(row + 4 * n4, 0, (size_t)(64 - 4 * n4)); /* the row beyond C's columns is zeroed */
  }
}

#define AMX_SFX emulated
#define TILE_CONFIG(cfg) emu_config(cfg)
#define TILE_RELEASE() memset(&tmm, 0, sizeof tmm)
#define TILE_LOAD(t, base, stride) emu_load(t, base, stride)
#define TILE_STORE(t, base, stride) emu_store(t, base, stride)
#define TILE_ZERO(t) emu_zero(t)
#define TILE_DPBSSD(c, a, b) emu_dpbssd(c, a, b)
#include "vta_amx_kernels.h"
