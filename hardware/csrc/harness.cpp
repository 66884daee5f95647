// A cycle-by-cycle host for the Verilator model of the generated accelerator (hardware/generator.py).
//
// The model's DRAM port is served by a sparse byte-addressed DRAM (4 KiB pages, created by the host's writes):
// every command is accepted at once; a read's beat is answered DRAM_LATENCY cycles later, in order; a write
// changes the bytes its strobes select when it is accepted and is acknowledged DRAM_LATENCY cycles later. A DMA to a page the host never wrote is a fault:
// the run stops and reports the address. The host drives the register bus as VTA's driver does.
// Plain C boundary: every function returns a status, never aborts, and keeps its state in the handle.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "Vvta_core.h"
#include "verilated.h"

#ifndef VTA_BUS_BYTES
#error "VTA_BUS_BYTES must be defined by the build"
#endif

// Amaranth names the ports mem__cmd_valid, reg__addr, ...; Verilator escapes the double underscore.
#define MEM(name) mem___05F##name
#define REG(name) reg___05F##name

namespace {

constexpr uint64_t PAGE_BITS = 12;
constexpr uint64_t PAGE = uint64_t(1) << PAGE_BITS;
constexpr size_t BUS = VTA_BUS_BYTES;

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

struct Beat {
    uint64_t ready;
    uint8_t data[BUS];
};

}  // namespace

struct vta_rtl {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vvta_core> top;
    std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> pages;
    std::deque<Beat> responses;
    std::deque<uint64_t> acks;   // when each accepted write is acknowledged
    uint64_t latency = 1;
    uint64_t cycle = 0;
    uint64_t beats_read = 0, beats_written = 0;
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

    void tick() {
        Vvta_core* t = top.get();
        bool have = !responses.empty() && responses.front().ready <= cycle;
        t->MEM(rsp_valid) = have;
        if (have) put(t->MEM(rsp_data), responses.front().data, BUS);
        bool ack = !acks.empty() && acks.front() <= cycle;
        t->MEM(wack) = ack;
        t->MEM(cmd_ready) = 1;
        t->clk = 0;
        t->eval();
        if (t->events) note_events(t->events);
        bool rsp_fire = have && t->MEM(rsp_ready);
        bool cmd_fire = t->MEM(cmd_valid);
        uint64_t addr = t->MEM(cmd_addr);
        bool write = t->MEM(cmd_write);
        uint8_t data[BUS], strb[(BUS + 7) / 8];
        if (cmd_fire && write) {
            get(t->MEM(cmd_data), data, BUS);
            get(t->MEM(cmd_strb), strb, sizeof strb);
        }
        t->clk = 1;
        t->eval();
        if (rsp_fire) responses.pop_front();
        if (ack) acks.pop_front();
        if (cmd_fire) {
            uint8_t* p = page(addr, false);
            uint64_t off = addr & (PAGE - 1);
            if (write) {
                ++beats_written;
                acks.push_back(cycle + latency);
                if (!p) note_fault("write", addr);
                else
                    for (size_t i = 0; i < BUS; ++i)
                        if (strb[i / 8] >> (i % 8) & 1) p[off + i] = data[i];
            } else {
                ++beats_read;
                Beat b;
                b.ready = cycle + latency;
                if (!p) {
                    note_fault("read", addr);
                    std::memset(b.data, 0, BUS);
                } else {
                    std::memcpy(b.data, p + off, BUS);
                }
                responses.push_back(b);
            }
        }
        ++cycle;
    }

    void reset() {
        top.reset();   // the model goes before its context
        ctx.reset();
        ctx = std::make_unique<VerilatedContext>();
        top = std::make_unique<Vvta_core>(ctx.get(), "top");
        responses.clear();
        acks.clear();
        fault.clear();
        top->REG(we) = 0;
        top->rst = 1;
        for (int i = 0; i < 4; ++i) tick();
        top->rst = 0;
        tick();
        cycle = 0;
    }
};

extern "C" {

vta_rtl* vta_rtl_create(uint64_t dram_latency) {
    try {
        auto* r = new vta_rtl();
        r->latency = dram_latency ? dram_latency : 1;
        r->reset();
        return r;
    } catch (...) {
        return nullptr;
    }
}

void vta_rtl_destroy(vta_rtl* r) { delete r; }

int vta_rtl_bus_bytes(void) { return (int)BUS; }

// Model reset: registers, queues and the DRAM port (SRAM contents are undefined after it; DRAM is kept).
int vta_rtl_reset(vta_rtl* r) {
    try {
        r->reset();
        return 0;
    } catch (...) {
        return -1;
    }
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

// One register write: a clock cycle with the bus's write enable high.
void vta_rtl_reg_write(vta_rtl* r, uint32_t offset, uint32_t value) {
    r->top->REG(addr) = offset;
    r->top->REG(wdata) = value;
    r->top->REG(we) = 1;
    r->tick();
    r->top->REG(we) = 0;
}

uint32_t vta_rtl_reg_read(vta_rtl* r, uint32_t offset) {
    r->top->REG(addr) = offset;
    r->top->eval();
    return r->top->REG(rdata);
}

// Clock the model until (register at offset & mask) != 0, at most max_cycles cycles.
// Returns 0 with *cycles set; 1 when max_cycles passed; 2 at a DMA fault (message in err).
int vta_rtl_run_until(vta_rtl* r, uint32_t offset, uint32_t mask, uint64_t max_cycles, uint64_t* cycles,
                      char* err, uint64_t errlen) {
    uint64_t start = r->cycle;
    r->top->REG(addr) = offset;
    r->top->REG(we) = 0;
    for (;;) {
        r->top->eval();
        if (r->top->REG(rdata) & mask) break;
        if (!r->fault.empty()) {
            *cycles = r->cycle - start;
            std::snprintf(err, errlen, "%s", r->fault.c_str());
            return 2;
        }
        if (r->cycle - start >= max_cycles) {
            *cycles = r->cycle - start;
            std::snprintf(err, errlen, "not done after max_cycles=%llu cycles", (unsigned long long)max_cycles);
            return 1;
        }
        r->tick();
    }
    *cycles = r->cycle - start;
    return r->fault.empty() ? 0 : (std::snprintf(err, errlen, "%s", r->fault.c_str()), 2);
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

}  // extern "C"
