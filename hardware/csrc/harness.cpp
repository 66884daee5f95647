// A cycle-by-cycle host for the Verilator model of the generated accelerator (hardware/generator.py).
//
// The model's AXI4 master (m_axi_*) is served by an AXI4 slave over a sparse byte-addressed DRAM (4 KiB pages,
// created by the host's writes), with the timing of a port such as the Zynq's ACP (``Dram``, set from Python by
// ``vta_rtl_dram_settings``; hardware/device.py DramSettings says where each default comes from). The read and
// write channels are independent. An AR is taken while fewer than ``max_reads`` read bursts are outstanding
// (taken and not fully answered); beat k of a read burst is ready ``read_latency`` + k cycles after its AR, and
// the R channel carries one ready beat a cycle, taking turns among the IDs that have one (each ID's bursts in
// order, RLAST on each burst's last beat), as a DRAM controller serving several masters does, then idles
// ``burst_gap`` cycles after each burst's last beat. An AW is taken while fewer than ``max_writes`` write bursts
// are unacknowledged; W beats are taken as they come, ``burst_gap`` idle cycles after each WLAST, and change the
// bytes their strobes select; a write burst is acknowledged (B) ``write_latency`` cycles after its last beat.
// Each of AR, AW, W (ready), R and B (valid) can be stalled at random, each with its own probability, from one
// seeded generator. Bursts touching an address range set by ``vta_rtl_dram_fail`` are answered SLVERR or DECERR
// (every beat of a read, the B of a write; the data still moves), and the first such burst is kept for the host.
// Every burst is checked against AXI4's rules (INCR, at most 256 beats, aligned to its
// size, inside one 4 KiB page, WLAST on the last beat only, strobes inside the beat's lanes, valid held with
// its payload until ready); a violation, or a DMA to a page the host never wrote, stops the run with a message.
// The host reaches the registers through the four AXI4-Lite slaves (s_axi_<block>_*), as VTA's driver does:
// a write is AW+W then B, a read AR then R, each a few cycles of the clock the accelerator runs on.
// Plain C boundary: every function returns a status, never aborts, and keeps its state in the handle.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "Vvta_core.h"
#include "verilated.h"

#ifndef VTA_BUS_BYTES
#error "VTA_BUS_BYTES must be defined by the build"
#endif
#ifndef VTA_MMIO_RANGE
#error "VTA_MMIO_RANGE must be defined by the build"
#endif

namespace {

constexpr uint64_t PAGE_BITS = 12;
constexpr uint64_t PAGE = uint64_t(1) << PAGE_BITS;
constexpr size_t BUS = VTA_BUS_BYTES;
constexpr uint32_t MMIO_RANGE = VTA_MMIO_RANGE;
constexpr size_t STRB_BYTES = (BUS + 7) / 8;
constexpr int RESET_CYCLES = 16;   // cycles the reset input is held (Xilinx's proc_sys_reset holds it 16 or more)

template <class T> void put(T& port, const uint8_t* src, size_t n) {
    if constexpr (std::is_integral_v<T>) {
        T v = 0;
        std::memcpy(&v, src, std::min(n, sizeof(T)));
        port = v;
    } else {
        std::memcpy(port.data(), src, n);
    }
}

template <class T> void get(const T& port, uint8_t* dst, size_t n) {
    if constexpr (std::is_integral_v<T>) {
        T v = port;
        std::memcpy(dst, &v, std::min(n, sizeof(T)));
    } else {
        std::memcpy(dst, port.data(), n);
    }
}

struct Burst {
    uint64_t addr;
    unsigned len, size;   // beats - 1, log2 bytes per beat
    uint64_t ready;       // reads: the cycle its first beat may go out; writes' B: when it may be sent
    unsigned beat;        // beats done
    unsigned id;
    unsigned resp;        // the response it gets: 0 OKAY, 2 SLVERR, 3 DECERR
};

// The DRAM port's timing (vta_rtl_dram_settings; hardware/device.py DramSettings documents each number).
enum { CH_AR, CH_AW, CH_W, CH_R, CH_B, CHANNELS };
struct Dram {
    uint64_t read_latency = 1, write_latency = 1;   // AR to first R beat; WLAST to B
    uint64_t max_reads = 1u << 20, max_writes = 1u << 20;   // outstanding bursts the slave accepts
    uint64_t burst_gap = 0;                          // idle cycles of R (W) after each burst's last beat
    unsigned stall_pct[CHANNELS] = {0, 0, 0, 0, 0};  // AR/AW/W ready, R/B valid held low, in percent
};

struct WBeat {
    uint8_t data[BUS];
    uint8_t strb[STRB_BYTES];
    bool last;
};

// One AXI4-Lite access by the host: a write (AW+W, then B) or a read (AR, then R).
struct Access {
    int kind = 0;         // 0 none, 1 write, 2 read
    int block = 0;
    uint32_t addr = 0, data = 0, result = 0;
    bool addr_done = false, data_done = false, finished = false;
};

// What an AXI channel offered and was not taken, to check it is offered again unchanged.
struct Offer {
    bool pending = false;
    uint64_t addr = 0;
    unsigned len = 0, size = 0, burst = 0, id = 0;
    uint8_t data[BUS] = {};
    uint8_t strb[STRB_BYTES] = {};
    bool last = false;
};

}  // namespace

// The rising edge without the model's input-combinational region (ico): Verilator's eval() runs ico at every call,
// and the harness's falling-edge eval() has just run it with the inputs the rising edge sees (only clk changes in
// between), so it would compute the same values again. These are the generated model's own phases (Verilator 5's
// names); where a Verilator names them otherwise they are absent (weak), and the rising edge is a plain eval().
class Vvta_core___024root;
bool Vvta_core___024root___eval_phase__act(Vvta_core___024root* vlSelf) __attribute__((weak));
bool Vvta_core___024root___eval_phase__nba(Vvta_core___024root* vlSelf) __attribute__((weak));

static void rising_edge(Vvta_core* t) {
    if (!Vvta_core___024root___eval_phase__act || !Vvta_core___024root___eval_phase__nba) {
        t->eval();
        return;
    }
    Vvta_core___024root* root = t->rootp;
    do {
        while (Vvta_core___024root___eval_phase__act(root)) {
        }
    } while (Vvta_core___024root___eval_phase__nba(root));
}

// The four register blocks' AXI4-Lite ports, by block index (hw_config MMIO_BLOCKS order).
#define LITE_DRIVE(P)                                                                   \
    t->P##_awaddr = a.addr; t->P##_awvalid = a.kind == 1 && !a.addr_done;              \
    t->P##_wdata = a.data; t->P##_wstrb = 0xF; t->P##_wvalid = a.kind == 1 && !a.data_done; \
    t->P##_bready = a.kind == 1; t->P##_araddr = a.addr;                                \
    t->P##_arvalid = a.kind == 2 && !a.addr_done; t->P##_rready = a.kind == 2;
#define LITE_SAMPLE(P)                                                                  \
    aw = t->P##_awvalid && t->P##_awready; w = t->P##_wvalid && t->P##_wready;        \
    b = t->P##_bvalid && t->P##_bready; ar = t->P##_arvalid && t->P##_arready;        \
    r = t->P##_rvalid && t->P##_rready; rdata = t->P##_rdata;

static void lite_drive(Vvta_core* t, const Access& a) {
    switch (a.block) {
        case 0: LITE_DRIVE(s_axi_fetch) break;
        case 1: LITE_DRIVE(s_axi_load) break;
        case 2: LITE_DRIVE(s_axi_compute) break;
        default: LITE_DRIVE(s_axi_store) break;
    }
}

static void lite_sample(Vvta_core* t, Access& a) {
    bool aw = false, w = false, b = false, ar = false, r = false;
    uint32_t rdata = 0;
    switch (a.block) {
        case 0: LITE_SAMPLE(s_axi_fetch) break;
        case 1: LITE_SAMPLE(s_axi_load) break;
        case 2: LITE_SAMPLE(s_axi_compute) break;
        default: LITE_SAMPLE(s_axi_store) break;
    }
    if (a.kind == 1) {
        a.addr_done |= aw;
        a.data_done |= w;
        if (b) a.finished = true;
    } else if (a.kind == 2) {
        a.addr_done |= ar;
        if (r) {
            a.result = rdata;
            a.finished = true;
        }
    }
}

struct vta_rtl {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vvta_core> top;
    std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> pages;
    std::vector<Burst> reads;          // accepted AR, in order
    std::deque<Burst> writes;          // accepted AW, in order
    std::deque<WBeat> wbeats;          // W beats taken before their AW (none from this master; kept general)
    std::deque<Burst> bresps;          // completed write bursts: when each is acknowledged, its ID
    int r_current = -1;                // the read burst whose beat R offers (held until RREADY)
    unsigned r_last_id = 0;
    Offer offered_ar, offered_aw, offered_w;
    Access access;                     // the host's AXI4-Lite access in progress
    Dram dram;
    uint64_t r_idle_until = 0, w_idle_until = 0;   // the burst gap after the last R / W burst
    uint64_t fail_lo = 0, fail_hi = 0;             // bursts touching [fail_lo, fail_hi) get fail_resp
    unsigned fail_resp = 0;
    uint64_t errors = 0, error_kind = 0, error_addr = 0, error_id = 0, error_resp = 0;   // the first one kept
    uint64_t cycle = 0;
    uint64_t beats_read = 0, beats_written = 0;
    uint64_t bursts[2] = {0, 0}, max_beats[2] = {0, 0};   // [read, write]
    std::mt19937_64 rng;                // back-pressure draws (Dram::stall_pct)
    std::string fault;
    // trace: (cycle << 8 | event bit) for every bit of the model's events port seen high, while tracing
    bool tracing = false;
    uint64_t trace_limit = 0;
    std::vector<uint64_t> trace;
    // per module (load, compute, store): instructions started, cycles from start to finish, last start
    uint64_t insns[3] = {0, 0, 0}, busy[3] = {0, 0, 0}, started_at[3] = {0, 0, 0};

    void note_events(unsigned events) {
        for (unsigned mod = 0; mod < 3; ++mod) {
            if (events >> (2 * mod) & 1) {
                ++insns[mod];
                started_at[mod] = cycle;
            }
            if (events >> (2 * mod + 1) & 1) busy[mod] += cycle + 1 - started_at[mod];
        }
        if (tracing)
            for (unsigned bit = 0; bit < 8; ++bit)
                if ((events >> bit & 1) && trace.size() < trace_limit) trace.push_back(cycle << 8 | bit);
    }

    uint8_t* page(uint64_t addr, bool create) {
        auto it = pages.find(addr >> PAGE_BITS);
        if (it != pages.end()) return it->second.get();
        if (!create) return nullptr;
        auto mem = std::make_unique<uint8_t[]>(PAGE);
        std::memset(mem.get(), 0, PAGE);
        uint8_t* raw = mem.get();
        pages.emplace(addr >> PAGE_BITS, std::move(mem));
        return raw;
    }

    void note_fault(const char* what, uint64_t addr) {
        if (!fault.empty()) return;
        char buf[160];
        std::snprintf(buf, sizeof buf, "DMA %s of DRAM at 0x%llx, which the host never wrote (cycle %llu)", what,
                      (unsigned long long)addr, (unsigned long long)cycle);
        fault = buf;
    }

    void violation(const std::string& what) {
        if (!fault.empty()) return;
        fault = "AXI4 protocol violation by the accelerator's master at cycle " + std::to_string(cycle) + ": " + what;
    }

    bool stall(int channel) { return dram.stall_pct[channel] && (rng() % 100) < dram.stall_pct[channel]; }

    // The response a burst of len + 1 beats of 2^size bytes at addr gets (and the first error is kept).
    unsigned respond(int write, uint64_t addr, unsigned len, unsigned size, unsigned id) {
        uint64_t end = addr + (uint64_t(len) + 1) * (uint64_t(1) << size);
        if (!fail_resp || end <= fail_lo || addr >= fail_hi) return 0;
        if (!errors++) error_kind = write, error_addr = addr, error_id = id, error_resp = fail_resp;
        return fail_resp;
    }

    // Forget every burst in flight (at a reset of the model; DRAM's contents and settings stay).
    void dram_reset() {
        reads.clear();
        r_current = -1;
        r_last_id = 0;
        writes.clear();
        wbeats.clear();
        bresps.clear();
        offered_ar = offered_aw = offered_w = Offer();
        r_idle_until = w_idle_until = 0;
        errors = 0;
    }

    void check_burst(const char* kind, uint64_t addr, unsigned len, unsigned size, unsigned burst) {
        char buf[200];
        uint64_t nbytes = uint64_t(1) << size;
        if (burst != 1) {
            std::snprintf(buf, sizeof buf, "%s burst type %u, not INCR", kind, burst);
            violation(buf);
        } else if (nbytes > BUS) {
            std::snprintf(buf, sizeof buf, "%s beats of %llu bytes on a %zu-byte bus", kind,
                          (unsigned long long)nbytes, BUS);
            violation(buf);
        } else if (addr % nbytes) {
            std::snprintf(buf, sizeof buf, "%s at 0x%llx not aligned to its %llu-byte beats", kind,
                          (unsigned long long)addr, (unsigned long long)nbytes);
            violation(buf);
        } else if ((addr & (PAGE - 1)) + (len + 1) * nbytes > PAGE) {
            std::snprintf(buf, sizeof buf, "%s of %u beats of %llu bytes at 0x%llx crosses a 4 KiB boundary", kind,
                          len + 1, (unsigned long long)nbytes, (unsigned long long)addr);
            violation(buf);
        }
    }

    void apply_write(const WBeat& wb) {
        Burst& bu = writes.front();
        uint64_t nbytes = uint64_t(1) << bu.size;
        uint64_t at = bu.addr + bu.beat * nbytes;
        uint64_t base = at & ~uint64_t(BUS - 1);
        size_t lane = at & (BUS - 1);
        bool last = bu.beat == bu.len;
        if (wb.last != last) violation(std::string("WLAST ") + (wb.last ? "on a beat before the last" : "missing"));
        for (size_t i = 0; i < BUS; ++i)
            if ((wb.strb[i / 8] >> (i % 8) & 1) && (i < lane || i >= lane + nbytes)) {
                violation("a write strobe outside the beat's lanes");
                break;
            }
        ++beats_written;
        uint8_t* p = page(base, false);
        if (!p) note_fault("write", at);
        else
            for (size_t i = 0; i < BUS; ++i)
                if (wb.strb[i / 8] >> (i % 8) & 1) p[(base & (PAGE - 1)) + i] = wb.data[i];
        if (++bu.beat > bu.len) {
            Burst done = bu;
            done.ready = cycle + dram.write_latency;
            writes.pop_front();
            bresps.push_back(done);
        }
    }

    void tick() {
        Vvta_core* t = top.get();
        // the slave's side of this cycle (the stall draws in a fixed order, so a seed replays a run)
        bool ar_stall = stall(CH_AR), aw_stall = stall(CH_AW), w_stall = stall(CH_W), r_stall = stall(CH_R);
        bool b_stall = stall(CH_B);
        bool arready = !ar_stall && reads.size() < dram.max_reads;
        bool awready = !aw_stall && writes.size() + bresps.size() < dram.max_writes;
        bool wready = !w_stall && cycle >= w_idle_until;
        t->m_axi_arready = arready;
        t->m_axi_awready = awready;
        t->m_axi_wready = wready;
        if (r_current < 0 && !r_stall && cycle >= r_idle_until) r_current = pick_read();
        bool rvalid = r_current >= 0;
        t->m_axi_rvalid = rvalid;
        if (rvalid) {
            Burst& bu = reads[r_current];
            t->m_axi_rid = bu.id;
            uint64_t at = bu.addr + bu.beat * (uint64_t(1) << bu.size);
            uint64_t base = at & ~uint64_t(BUS - 1);
            uint8_t* p = page(base, false);
            uint8_t data[BUS];
            if (!p) {
                note_fault("read", at);
                std::memset(data, 0, BUS);
            } else {
                std::memcpy(data, p + (base & (PAGE - 1)), BUS);
            }
            put(t->m_axi_rdata, data, BUS);
            t->m_axi_rlast = bu.beat == bu.len;
            t->m_axi_rresp = bu.resp;
        }
        bool bvalid = !bresps.empty() && bresps.front().ready <= cycle && !b_stall;
        t->m_axi_bvalid = bvalid;
        t->m_axi_bresp = bvalid ? bresps.front().resp : 0;
        if (bvalid) t->m_axi_bid = bresps.front().id;
        if (access.kind) lite_drive(t, access);
        t->clk = 0;
        t->eval();
        if (t->events) note_events(t->events);
        // the master's side, settled
        bool ar = t->m_axi_arvalid, aw = t->m_axi_awvalid, w = t->m_axi_wvalid;
        Offer now_ar, now_aw, now_w;
        if (ar) {
            now_ar.addr = t->m_axi_araddr, now_ar.len = t->m_axi_arlen, now_ar.size = t->m_axi_arsize;
            now_ar.burst = t->m_axi_arburst, now_ar.id = t->m_axi_arid;
        }
        if (aw) {
            now_aw.addr = t->m_axi_awaddr, now_aw.len = t->m_axi_awlen, now_aw.size = t->m_axi_awsize;
            now_aw.burst = t->m_axi_awburst, now_aw.id = t->m_axi_awid;
        }
        if (w) {
            get(t->m_axi_wdata, now_w.data, BUS);
            get(t->m_axi_wstrb, now_w.strb, STRB_BYTES);
            now_w.last = t->m_axi_wlast;
        }
        check_held("AR", offered_ar, ar, now_ar);
        check_held("AW", offered_aw, aw, now_aw);
        check_held("W", offered_w, w, now_w);
        bool ar_fire = ar && arready, aw_fire = aw && awready, w_fire = w && wready;
        bool r_fire = rvalid && t->m_axi_rready, b_fire = bvalid && t->m_axi_bready;
        offered_ar.pending = ar && !ar_fire;
        offered_aw.pending = aw && !aw_fire;
        offered_w.pending = w && !w_fire;
        if (access.kind) lite_sample(t, access);
        t->clk = 1;
        rising_edge(t);
        // the slave takes what was handed over at this edge
        if (ar_fire) {
            check_burst("AR", now_ar.addr, now_ar.len, now_ar.size, now_ar.burst);
            reads.push_back({now_ar.addr, now_ar.len, now_ar.size, cycle + dram.read_latency, 0, now_ar.id,
                             respond(0, now_ar.addr, now_ar.len, now_ar.size, now_ar.id)});
            ++bursts[0];
            max_beats[0] = std::max<uint64_t>(max_beats[0], now_ar.len + 1);
        }
        if (aw_fire) {
            check_burst("AW", now_aw.addr, now_aw.len, now_aw.size, now_aw.burst);
            writes.push_back({now_aw.addr, now_aw.len, now_aw.size, 0, 0, now_aw.id,
                              respond(1, now_aw.addr, now_aw.len, now_aw.size, now_aw.id)});
            ++bursts[1];
            max_beats[1] = std::max<uint64_t>(max_beats[1], now_aw.len + 1);
        }
        if (w_fire) {
            WBeat wb;
            std::memcpy(wb.data, now_w.data, BUS);
            std::memcpy(wb.strb, now_w.strb, STRB_BYTES);
            wb.last = now_w.last;
            wbeats.push_back(wb);
            if (wb.last) w_idle_until = cycle + 1 + dram.burst_gap;
        }
        while (!wbeats.empty() && !writes.empty()) {
            apply_write(wbeats.front());
            wbeats.pop_front();
        }
        if (r_fire) {
            Burst& bu = reads[r_current];
            ++beats_read;
            r_last_id = bu.id;
            if (++bu.beat > bu.len) {
                reads.erase(reads.begin() + r_current);
                r_idle_until = cycle + 1 + dram.burst_gap;
            }
            r_current = -1;
        }
        if (b_fire) bresps.pop_front();
        ++cycle;
    }

    void check_held(const char* ch, Offer& before, bool valid, const Offer& now) {
        if (!before.pending) {
            if (valid) before = now;   // remembered in case it is not taken
            return;
        }
        bool same = valid && before.addr == now.addr && before.len == now.len && before.size == now.size &&
                    before.burst == now.burst && before.id == now.id && before.last == now.last &&
                    !std::memcmp(before.data, now.data, BUS) && !std::memcmp(before.strb, now.strb, STRB_BYTES);
        if (!same) violation(std::string(ch) + (valid ? " payload changed" : "VALID dropped") + " before READY");
        before = now;
    }

    // The read burst whose next beat R carries this cycle: among each ID's oldest burst, those whose next beat
    // is ready, the first ID after the last one served; -1 if none.
    int pick_read() {
        int best = -1;
        unsigned best_rank = ~0u;
        uint32_t seen = 0;
        for (size_t i = 0; i < reads.size(); ++i) {
            const Burst& bu = reads[i];
            uint32_t bit = uint32_t(1) << (bu.id & 31);
            if (seen & bit) continue;   // a younger burst of an ID waits for the older
            seen |= bit;
            if (bu.ready + bu.beat > cycle) continue;
            unsigned rank = (bu.id - r_last_id - 1) & 0xFF;
            if (rank < best_rank) best = int(i), best_rank = rank;
        }
        return best;
    }

    // Run one AXI4-Lite access to completion (the accelerator runs meanwhile); false if it never completes.
    bool lite(int kind, uint32_t offset, uint32_t value, uint32_t* result) {
        access = Access();
        access.kind = kind;
        access.block = std::min<uint32_t>(offset / MMIO_RANGE, 3);
        access.addr = offset - access.block * MMIO_RANGE;
        access.data = value;
        for (int i = 0; i < 1000 && !access.finished; ++i) tick();
        bool ok = access.finished;
        if (result) *result = access.result;
        access.kind = 0;
        lite_drive(top.get(), access);   // every valid and ready of the port low again
        return ok;
    }

    // The reset input held for RESET_CYCLES cycles: registers, queues and the DRAM port start over, SRAM contents
    // stay (as a board's reset leaves block RAM); ``fresh``: a new model first, every SRAM zero (as a bitstream
    // download leaves block RAM).
    void reset(bool fresh) {
        if (fresh || !top) {
            top.reset();   // the model goes before its context
            ctx.reset();
            ctx = std::make_unique<VerilatedContext>();
            top = std::make_unique<Vvta_core>(ctx.get(), "top");
        }
        access = Access();
        for (int block = 0; block < 4; ++block) {
            access.block = block;
            lite_drive(top.get(), access);
        }
        top->rst = 1;
        for (int i = 0; i < RESET_CYCLES; ++i) tick();
        // what the slave held of the master's transfers before the reset: forgotten, as the master forgot them
        dram_reset();
        fault.clear();
        top->rst = 0;
        tick();
        cycle = 0;
    }
};

extern "C" {

vta_rtl* vta_rtl_create(uint64_t dram_latency) {
    try {
        auto* r = new vta_rtl();
        r->dram.read_latency = r->dram.write_latency = dram_latency ? dram_latency : 1;
        r->reset(true);
        return r;
    } catch (...) {
        return nullptr;
    }
}

void vta_rtl_destroy(vta_rtl* r) { delete r; }

int vta_rtl_bus_bytes(void) { return (int)BUS; }

// The reset input, held RESET_CYCLES cycles: registers, queues and the DRAM port start over; SRAMs and DRAM keep
// their contents. fresh != 0: a new model first (every SRAM zero, as after a bitstream download).
int vta_rtl_reset(vta_rtl* r, int fresh) {
    try {
        r->reset(fresh != 0);
        return 0;
    } catch (...) {
        return -1;
    }
}

// The four register blocks' interrupt outputs now (bit i: block i, hw_config MMIO_BLOCKS order).
unsigned vta_rtl_interrupts(vta_rtl* r) {
    const Vvta_core* t = r->top.get();
    return unsigned(t->interrupt_fetch) | unsigned(t->interrupt_load) << 1 | unsigned(t->interrupt_compute) << 2 |
           unsigned(t->interrupt_store) << 3;
}

int vta_rtl_dram_write(vta_rtl* r, uint64_t addr, const uint8_t* data, uint64_t n) {
    try {
        while (n) {
            uint64_t off = addr & (PAGE - 1), chunk = std::min(n, PAGE - off);
            std::memcpy(r->page(addr, true) + off, data, chunk);
            addr += chunk, data += chunk, n -= chunk;
        }
        return 0;
    } catch (...) {
        return -1;
    }
}

// Bytes never written read as zero; returns how many of the n bytes lay in pages the host wrote.
uint64_t vta_rtl_dram_read(vta_rtl* r, uint64_t addr, uint8_t* out, uint64_t n) {
    uint64_t mapped = 0;
    while (n) {
        uint64_t off = addr & (PAGE - 1), chunk = std::min(n, PAGE - off);
        uint8_t* p = r->page(addr, false);
        if (p) {
            std::memcpy(out, p + off, chunk);
            mapped += chunk;
        } else {
            std::memset(out, 0, chunk);
        }
        addr += chunk, out += chunk, n -= chunk;
    }
    return mapped;
}

void vta_rtl_dram_clear(vta_rtl* r) { r->pages.clear(); }

// Drops the pages wholly inside [addr, addr + n): a DMA there faults again, as before the host wrote them.
void vta_rtl_dram_unmap(vta_rtl* r, uint64_t addr, uint64_t n) {
    uint64_t first = (addr + PAGE - 1) >> PAGE_BITS, end = (addr + n) >> PAGE_BITS;
    for (uint64_t page = first; page < end; ++page) r->pages.erase(page);
}

// One register write through the block's AXI4-Lite port (offset from MMIO_BASE): AW+W, then B.
// Returns 0, or -1 when the slave never answered.
int vta_rtl_reg_write(vta_rtl* r, uint32_t offset, uint32_t value) {
    return r->lite(1, offset, value, nullptr) ? 0 : -1;
}

// One register read through the block's AXI4-Lite port: AR, then R (a read of CTRL clears its ap_done).
uint32_t vta_rtl_reg_read(vta_rtl* r, uint32_t offset) {
    uint32_t value = 0;
    r->lite(2, offset, 0, &value);
    return value;
}

// Clock the model, reading the register at offset through AXI4-Lite back to back, until (value & mask) != 0,
// at most max_cycles cycles. Returns 0 with *cycles set (to the cycle the read that saw it returned); 1 when
// max_cycles passed; 2 at a DMA fault or an AXI violation (message in err).
int vta_rtl_run_until(vta_rtl* r, uint32_t offset, uint32_t mask, uint64_t max_cycles, uint64_t* cycles,
                      char* err, uint64_t errlen) {
    uint64_t start = r->cycle;
    for (;;) {
        uint32_t value = 0;
        bool answered = r->lite(2, offset, 0, &value);
        if (!r->fault.empty()) {
            *cycles = r->cycle - start;
            std::snprintf(err, errlen, "%s", r->fault.c_str());
            return 2;
        }
        if (!answered) {
            *cycles = r->cycle - start;
            std::snprintf(err, errlen, "the AXI4-Lite read of register 0x%x got no response", offset);
            return 2;
        }
        if (value & mask) break;
        if (r->cycle - start >= max_cycles) {
            *cycles = r->cycle - start;
            std::snprintf(err, errlen, "not done after max_cycles=%llu cycles", (unsigned long long)max_cycles);
            return 1;
        }
    }
    *cycles = r->cycle - start;
    return 0;
}

uint64_t vta_rtl_cycle(vta_rtl* r) { return r->cycle; }

// Per module (load, compute, store): instructions started and busy cycles since the last call; clears them.
void vta_rtl_module_stats(vta_rtl* r, uint64_t* insns, uint64_t* busy) {
    for (int i = 0; i < 3; ++i) {
        insns[i] = r->insns[i];
        busy[i] = r->busy[i];
        r->insns[i] = r->busy[i] = 0;
    }
}

// Start (limit > 0: at most limit events kept) or stop (limit == 0) recording the events port; starting clears.
void vta_rtl_trace(vta_rtl* r, uint64_t limit) {
    r->tracing = limit != 0;
    r->trace_limit = limit;
    r->trace.clear();
}

// Copies up to n recorded events (cycle << 8 | bit) to out; returns how many were recorded in all.
uint64_t vta_rtl_trace_read(vta_rtl* r, uint64_t* out, uint64_t n) {
    uint64_t k = std::min<uint64_t>(n, r->trace.size());
    if (k) std::memcpy(out, r->trace.data(), k * sizeof(uint64_t));
    return r->trace.size();
}
uint64_t vta_rtl_beats(vta_rtl* r, int written) { return written ? r->beats_written : r->beats_read; }

// AXI4 traffic since the model was created: [read bursts, write bursts, beats read, beats written,
// longest read burst, longest write burst] (beats).
void vta_rtl_axi_stats(vta_rtl* r, uint64_t* out) {
    out[0] = r->bursts[0], out[1] = r->bursts[1], out[2] = r->beats_read, out[3] = r->beats_written;
    out[4] = r->max_beats[0], out[5] = r->max_beats[1];
}

// Stall the DRAM's AXI4 ready signals and responses at random, each with probability percent/100 (0: never).
void vta_rtl_stress(vta_rtl* r, uint64_t seed, unsigned percent) {
    r->rng.seed(seed);
    for (unsigned& pct : r->dram.stall_pct) pct = std::min(percent, 99u);
}

// The DRAM port's timing: v = [read_latency, write_latency, max_reads, max_writes, burst_gap, then the stall
// percentages of AR, AW, W, R, B, then the seed]; n = 11. Latencies at least 1, limits at least 1, percentages
// below 100 (the caller checks; out-of-range values are clamped). Takes effect for bursts accepted from now on.
int vta_rtl_dram_settings(vta_rtl* r, const uint64_t* v, unsigned n) {
    if (n != 5 + CHANNELS + 1) return -1;
    Dram d;
    d.read_latency = std::max<uint64_t>(v[0], 1);
    d.write_latency = std::max<uint64_t>(v[1], 1);
    d.max_reads = std::max<uint64_t>(v[2], 1);
    d.max_writes = std::max<uint64_t>(v[3], 1);
    d.burst_gap = v[4];
    for (int c = 0; c < CHANNELS; ++c) d.stall_pct[c] = (unsigned)std::min<uint64_t>(v[5 + c], 99);
    r->dram = d;
    r->rng.seed(v[5 + CHANNELS]);
    return 0;
}

// Answer every burst touching [lo, hi) with resp (2 SLVERR, 3 DECERR; 0 stops it).
void vta_rtl_dram_fail(vta_rtl* r, uint64_t lo, uint64_t hi, unsigned resp) {
    r->fail_lo = lo, r->fail_hi = hi, r->fail_resp = resp & 3;
}

// The error responses the DRAM gave since the last call (or the model's reset): out = [how many, the first
// one's kind (0 read, 1 write), its burst address, its AXI ID, its response code]; forgets them.
void vta_rtl_dram_errors(vta_rtl* r, uint64_t* out) {
    out[0] = r->errors, out[1] = r->error_kind, out[2] = r->error_addr, out[3] = r->error_id;
    out[4] = r->error_resp;
    r->errors = 0;
}

}  // extern "C"
