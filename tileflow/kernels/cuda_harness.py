"""A standalone CUDA program that times many generated dataflows of one workload shape:
the kernels of every dataflow plus a host harness that loads the inputs and the reference
outputs (raw float32 files in the kernels' pitched layouts), runs each dataflow's launches
in order, checks its outputs and times it with CUDA events, writing one CSV row per
dataflow. Built once with nvcc on a machine without a GPU, run where there is one; the
program needs nothing but the CUDA driver."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tileflow.kernels.c_source import pitched
from tileflow.kernels.cuda_source import CudaSource

# the columns the program writes, in order (the reader checks them)
COLUMNS = ("id", "status", "median_s", "min_s", "max_s", "first_s", "reps", "max_rel_err",
           "device", "sm_count", "l2_bytes", "cc", "driver_version", "runtime_version")


@dataclass(frozen=True)
class HarnessFlow:
    """One dataflow of the program: its campaign id and its generated CUDA."""

    id: int
    source: CudaSource


def tensor_file(tensor: str) -> str:
    return f"{tensor}.f32"


def reference_file(tensor: str) -> str:
    return f"{tensor}.ref.f32"


def harness_source(flows: Sequence[HarnessFlow], shapes: dict[str, tuple[int, ...]],
                   inputs: Sequence[str], outputs: Sequence[str]) -> str:
    """The whole program: every flow's kernels (prefixed `k<id>_`), then the host code.
    `shapes`: every tensor any flow passes (logical shapes); `inputs` are read from
    DATA/<t>.f32, `outputs` checked against DATA/<t>.ref.f32."""
    names = sorted(shapes)
    index = {t: i for i, t in enumerate(names)}
    parts = [HEADER]
    parts += [f.source.text for f in flows]
    host = [f"static const int NT = {len(names)};",
            "static const char *T_NAME[] = {" + ", ".join(f'"{t}"' for t in names) + "};",
            "static const long T_WORDS[] = {" + ", ".join(
                f"{math.prod(pitched(shapes[t]))}L" for t in names) + "};",
            "static const long T_LAST[] = {" + ", ".join(
                f"{shapes[t][-1]}L" for t in names) + "};",
            "static const long T_PITCH[] = {" + ", ".join(
                f"{pitched(shapes[t])[-1]}L" for t in names) + "};",
            "static const int T_ROLE[] = {" + ", ".join(
                "1" if t in inputs else "2" if t in outputs else "0" for t in names) + "};"]
    for f in flows:
        source = f.source
        calls = []
        for la in source.launches:
            args = []
            for a in la.arguments:
                if a.endswith("_scratch") and a not in index:
                    args.append(f"S[{list(source.scratch_words).index(a[:-8])}]")
                else:
                    args.append(f"T[{index[a]}]")
            calls.append(f"    TF_LAUNCH({la.name}, {la.blocks}, {la.threads}, {', '.join(args)});")
        host.append(f"static void run_{f.id}(float **T, float **S) {{\n    (void)T; (void)S;\n"
                    + "\n".join(calls) + "\n}")
        words = ", ".join(f"{w}L" for w in source.scratch_words.values()) or "0L"
        host.append(f"static const long SCRATCH_{f.id}[] = {{{words}}};")
    host.append("struct Flow { int id; void (*run)(float **, float **); int nscratch; "
                "const long *scratch; };")
    host.append("static const Flow FLOWS[] = {\n" + ",\n".join(
        f"    {{{f.id}, run_{f.id}, {len(f.source.scratch_words)}, SCRATCH_{f.id}}}"
        for f in flows) + "\n};")
    host.append(f"static const int NFLOWS = {len(flows)};")
    return "\n".join(parts) + "\n" + "\n".join(host) + "\n" + MAIN


HEADER = """#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <string>
#include <algorithm>
#include <chrono>
#ifndef TF_LAUNCH
#define TF_LAUNCH(kernel, blocks, threads, ...) kernel<<<blocks, threads>>>(__VA_ARGS__)
#endif
"""

# The CUDA runtime calls the harness makes, on the CPU: the program compiles with g++ and
# runs every block's threads as OpenMP threads (`kernels.cuda_emulate`), to test it here.
EMULATED_RUNTIME = r"""#pragma once
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <omp.h>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };
struct cudaDeviceProp { char name[256]; int multiProcessorCount, l2CacheSize, major, minor; };
typedef double *cudaEvent_t;
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    strcpy(p->name, "CPU emulation"); p->multiProcessorCount = 1; p->l2CacheSize = 0;
    p->major = 0; p->minor = 0; return cudaSuccess;
}
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
template <class T> cudaError_t cudaMalloc(T **p, size_t n) {
    *p = (T *)malloc(n); return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    memcpy(d, s, n); return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *d, int v, size_t n) {
    memset(d, v, n); return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new double(0); return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e) {
    *e = std::chrono::duration<double>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)((*b - *a) * 1e3); return cudaSuccess;
}
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
static inline const char *cudaGetErrorName(cudaError_t) { return "cudaErrorUnknown"; }
"""
EMULATED_LAUNCH = (
    "#define TF_LAUNCH(kernel, nb, nt, ...) do { const int nt_ = (nt); blockDim.x = nt_; "
    "gridDim.x = nb; "
    "for (unsigned b_ = 0; b_ < (unsigned)(nb); ++b_) { blockIdx.x = b_; "
    "_Pragma(\"omp parallel num_threads(nt_)\") { threadIdx.x = omp_get_thread_num(); "
    "kernel(__VA_ARGS__); } } } while (0)\n")


def build_emulated(program_text: str, folder: str | Path) -> Path:
    """The harness program compiled with g++ for the CPU (see EMULATED_RUNTIME): an
    executable that behaves as the CUDA one does, slowly."""
    import subprocess

    from tileflow.kernels.cuda_emulate import SHIM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cuda_runtime.h").write_text(EMULATED_RUNTIME)
    (folder / "program.cpp").write_text(SHIM + EMULATED_LAUNCH + program_text)
    binary = folder / "program"
    done = subprocess.run(["g++", "-x", "c++", "-O1", "-fopenmp", "-w", "-I", str(folder),
                           "-o", str(binary), str(folder / "program.cpp")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"g++ failed on the emulated harness:\n{done.stderr[-3000:]}")
    return binary


MAIN = r"""
// ---- host harness ---------------------------------------------------------------------
static double now_s() {
    return std::chrono::duration<double>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool load(const std::string &path, std::vector<float> &into, long words) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return false;
    into.resize(words);
    size_t got = fread(into.data(), sizeof(float), words, f);
    fclose(f);
    return got == (size_t)words;
}

static void usage() {
    fprintf(stderr, "usage: PROGRAM --data DIR --csv FILE [--budget-s S] [--kernel-s S] "
            "[--min-reps N] [--max-reps N] [--only ID,ID,...] [--once]\n");
    exit(2);
}

int main(int argc, char **argv) {
    std::string data, csv;
    double budget_s = 60, kernel_s = 0.2;
    int min_reps = 3, max_reps = 50;
    bool once = false;
    std::vector<int> only;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string { if (i + 1 >= argc) usage(); return argv[++i]; };
        if (a == "--data") data = next();
        else if (a == "--csv") csv = next();
        else if (a == "--budget-s") budget_s = atof(next().c_str());
        else if (a == "--kernel-s") kernel_s = atof(next().c_str());
        else if (a == "--min-reps") min_reps = atoi(next().c_str());
        else if (a == "--max-reps") max_reps = atoi(next().c_str());
        else if (a == "--once") once = true;
        else if (a == "--only") {
            std::string s = next();
            size_t p = 0;
            while (p < s.size()) {
                size_t q = s.find(',', p);
                if (q == std::string::npos) q = s.size();
                if (q > p) only.push_back(atoi(s.substr(p, q - p).c_str()));
                p = q + 1;
            }
        } else usage();
    }
    if (data.empty() || (csv.empty() && !once)) usage();
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "no CUDA device\n");
        return 3;
    }
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::vector<std::vector<float>> host(NT), ref(NT);
    std::vector<float *> T(NT);
    for (int t = 0; t < NT; ++t) {
        if (cudaMalloc(&T[t], sizeof(float) * T_WORDS[t]) != cudaSuccess) {
            fprintf(stderr, "cudaMalloc failed for %s\n", T_NAME[t]);
            return 3;
        }
        if (T_ROLE[t] == 1) {
            if (!load(data + "/" + T_NAME[t] + ".f32", host[t], T_WORDS[t])) {
                fprintf(stderr, "cannot read %s/%s.f32\n", data.c_str(), T_NAME[t]);
                return 2;
            }
            cudaMemcpy(T[t], host[t].data(), sizeof(float) * T_WORDS[t],
                       cudaMemcpyHostToDevice);
        } else if (T_ROLE[t] == 2 && !load(data + "/" + T_NAME[t] + ".ref.f32", ref[t],
                                           T_WORDS[t])) {
            fprintf(stderr, "cannot read %s/%s.ref.f32\n", data.c_str(), T_NAME[t]);
            return 2;
        }
    }
    FILE *out = nullptr;
    if (!once) {
        out = fopen(csv.c_str(), "a");
        if (!out) { fprintf(stderr, "cannot write %s\n", csv.c_str()); return 2; }
        fseek(out, 0, SEEK_END);
        if (ftell(out) == 0)
            fprintf(out, "id,status,median_s,min_s,max_s,first_s,reps,max_rel_err,device,"
                         "sm_count,l2_bytes,cc,driver_version,runtime_version\n");
    }
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    const double began = now_s();
    bool dead = false;
    int done = 0;
    for (int k = 0; k < NFLOWS; ++k) {
        const Flow &f = FLOWS[k];
        if (!only.empty() && std::find(only.begin(), only.end(), f.id) == only.end()) continue;
        std::string status = "ok";
        double median = NAN, lo = NAN, hi = NAN, first = NAN, err = NAN;
        int reps = 0;
        if (dead) status = "skipped_after_error";
        else if (!once && now_s() - began > budget_s) status = "skipped_budget";
        else {
            std::vector<float *> S(f.nscratch);
            for (int s = 0; s < f.nscratch; ++s)
                cudaMalloc(&S[s], sizeof(float) * (f.scratch[s] > 0 ? f.scratch[s] : 1));
            for (int t = 0; t < NT; ++t)  // everything not read as input starts as NaN
                if (T_ROLE[t] != 1) cudaMemset(T[t], 0xff, sizeof(float) * T_WORDS[t]);
            cudaEventRecord(start);
            f.run(T.data(), S.data());
            cudaEventRecord(stop);
            cudaError_t e = cudaEventSynchronize(stop);
            if (e == cudaSuccess) e = cudaGetLastError();
            if (e != cudaSuccess) {
                status = std::string("error_") + cudaGetErrorName(e);
                // a launch the device refuses (resources, configuration) leaves the context
                // usable; a fault during a kernel does not: stop there
                cudaGetLastError();
                dead = cudaDeviceSynchronize() != cudaSuccess;
            } else if (!once) {
                float ms = 0;
                cudaEventElapsedTime(&ms, start, stop);
                first = ms / 1e3;
                double worst = 0, scale = 0;
                for (int t = 0; t < NT; ++t) {
                    if (T_ROLE[t] != 2) continue;
                    std::vector<float> got(T_WORDS[t]);
                    cudaMemcpy(got.data(), T[t], sizeof(float) * T_WORDS[t],
                               cudaMemcpyDeviceToHost);
                    for (long z = 0; z < T_WORDS[t]; ++z) {
                        if (z % T_PITCH[t] >= T_LAST[t]) continue;
                        double d = fabs((double)got[z] - ref[t][z]);
                        if (!(d <= worst)) worst = d;  // NaN propagates
                        scale = std::max(scale, (double)fabs(ref[t][z]));
                    }
                }
                err = scale > 0 ? worst / scale : worst;
                // about kernel_s of timed runs: min_reps to max_reps of them, one where a
                // run takes longer than kernel_s (the checked run was its warm-up)
                reps = first > 0 ? (int)(kernel_s / first) : max_reps;
                reps = std::max(min_reps, std::min(max_reps, reps));
                if (first > kernel_s) reps = 1;
                else f.run(T.data(), S.data());  // warm-up
                std::vector<double> times;
                for (int r = 0; r < reps; ++r) {
                    cudaEventRecord(start);
                    f.run(T.data(), S.data());
                    cudaEventRecord(stop);
                    cudaEventSynchronize(stop);
                    cudaEventElapsedTime(&ms, start, stop);
                    times.push_back(ms / 1e3);
                }
                e = cudaGetLastError();
                if (e != cudaSuccess) {
                    status = std::string("error_") + cudaGetErrorName(e);
                    dead = cudaDeviceSynchronize() != cudaSuccess;
                } else {
                    std::sort(times.begin(), times.end());
                    median = times.size() % 2 ? times[times.size() / 2]
                             : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
                    lo = times.front();
                    hi = times.back();
                }
            }
            for (int s = 0; s < f.nscratch; ++s) cudaFree(S[s]);
        }
        if (out) {
            fprintf(out, "%d,%s,%.9g,%.9g,%.9g,%.9g,%d,%.6g,\"%s\",%d,%d,%d.%d,%d,%d\n", f.id,
                    status.c_str(), median, lo, hi, first, reps, err, prop.name,
                    prop.multiProcessorCount, prop.l2CacheSize, prop.major, prop.minor,
                    driver, runtime);
            fflush(out);
        }
        ++done;
        if (done % 10 == 0)
            fprintf(stderr, "  %d dataflows, %.1f s\n", done, now_s() - began);
    }
    if (out) fclose(out);
    return dead ? 4 : 0;
}
"""
