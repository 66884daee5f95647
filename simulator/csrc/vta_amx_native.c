/* The AMX kernels over the real tile instructions (vta_amx_kernels.h), and the CPU / OS check that allows them.
 * The AMX target is enabled for this translation unit only (the pragma below, as -mamx-tile -mamx-int8 would),
 * so no other code of the simulator can contain AMX instructions; vta_sim.c calls these functions only after
 * vta_amx_refusal() said nothing against them. */
#define _GNU_SOURCE /* syscall */
#include "vta_amx.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(VTA_SIM_PORTABLE)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC target("amx-tile,amx-int8")
#endif
#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* GCC's _tile_loadd (GCC 12, amxtileintrin.h) is an asm statement that does not tell the compiler it reads memory,
 * and _tile_loadconfig's asm names only the first 8 of its 64 bytes: without these barriers the compiler may drop
 * or sink the stores that fill a staging buffer or the configuration before the instruction reads them. */
#define MEMORY_BARRIER() __asm__ volatile("" ::: "memory")
#define AMX_SFX native
#define TILE_CONFIG(cfg)     \
  do {                       \
    MEMORY_BARRIER();        \
    _tile_loadconfig(cfg);   \
  } while (0)
#define TILE_RELEASE() _tile_release()
#define TILE_LOAD(t, base, stride)   \
  do {                               \
    MEMORY_BARRIER();                \
    _tile_loadd(t, base, stride);    \
  } while (0)
#define TILE_STORE(t, base, stride) _tile_stored(t, base, stride) /* its asm clobbers memory */
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#include "vta_amx_kernels.h"

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18

static const char *amx_refusal = "not checked"; /* why the path is off, or NULL: set once (amx_check) */

static void amx_check(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) {
    amx_refusal = "this CPU lacks AMX-TILE/AMX-INT8";
    return;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) {
    amx_refusal = "the OS has not enabled XSAVE (OSXSAVE)";
    return;
  }
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if (!(lo >> XFEATURE_XTILECFG & 1) || !(lo >> XFEATURE_XTILEDATA & 1)) {
    amx_refusal = "the OS does not manage the tile state (XCR0 bits 17-18 clear)";
    return;
  }
#ifdef __linux__
  /* Linux (5.16+) lets a process use the 8 KB of tile data only after it asks; a kernel that refuses leaves the
   * path off, and the simulator falls back to avx512vnni. */
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
    amx_refusal = errno == ENOSPC ? "Linux refused the tile state: a thread's signal stack (sigaltstack) is too "
                                    "small for it (ENOSPC)"
                  : errno == EINVAL ? "Linux refused the tile state (EINVAL: a kernel before 5.16, or AMX disabled)"
                                    : "Linux refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM failed)";
    return;
  }
  if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &granted) || !(granted >> XFEATURE_XTILEDATA & 1)) {
    amx_refusal = "Linux did not grant the tile state (ARCH_GET_XCOMP_PERM)";
    return;
  }
  amx_refusal = NULL;
#else
  amx_refusal = "no known way to ask this OS for the tile state";
#endif
}

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

const char *vta_amx_refusal(void) {
  pthread_once(&amx_once, amx_check);
  return amx_refusal;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else /* not an x86-64 GCC/Clang build: no AMX */
const char *vta_amx_refusal(void) { return "not an x86-64 build"; }
#endif
