"""Small files in Timeloop's and the original TileFlow's formats, written for the tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

# DRAM (LPDDR4) -> Buffer (1024 rows x 4 words) -> 4 PEs, each a 16-word register and a MAC.
ARCH_V03 = """
architecture:
  version: 0.3
  subtree:
  - name: System
    attributes: {technology: 45nm}
    local:
    - name: DRAM
      class: DRAM
      attributes: {type: LPDDR4, width: 64, word-bits: 16, read_bandwidth: 4,
                   write_bandwidth: 4}
    subtree:
    - name: chip
      local:
      - name: Buffer
        class: SRAM
        attributes: {depth: 1024, width: 64, block_size: 4, word-bits: 16,
                     read_bandwidth: 16, write_bandwidth: 16}
      subtree:
      - name: PE[0..3]
        local:
        - name: Reg
          class: regfile
          attributes: {depth: 16, width: 16, word-bits: 16, meshX: 2}
        - name: MAC
          class: intmac
          attributes: {datawidth: 16, meshX: 2}
"""

# The same machine in the v0.4 layout.
ARCH_V04 = """
architecture:
  version: 0.4
  nodes:
  - !Container
    name: System
    attributes: {technology: 45nm}
  - !Component
    name: DRAM
    class: DRAM
    attributes: {type: LPDDR4, width: 64, datawidth: 16, read_bandwidth: 4,
                 write_bandwidth: 4}
  - !Component
    name: Buffer
    class: SRAM
    attributes: {depth: 1024, width: 64, datawidth: 16, read_bandwidth: 16,
                 write_bandwidth: 16}
  - !Container
    name: PE
    spatial: {meshX: 2, meshY: 2}
  - !Component
    name: Reg
    class: regfile
    attributes: {depth: 16, width: 16, datawidth: 16}
  - !Component
    name: MAC
    class: intmac
    attributes: {datawidth: 16}
"""

GEMM_PROBLEM = """
problem:
  shape:
    name: gemm
    dimensions: [M, N, K]
    data-spaces:
    - name: A
      projection: [[[M]], [[K]]]
    - name: B
      projection: [[[K]], [[N]]]
    - name: Z
      projection: [[[M]], [[N]]]
      read-write: True
  instance: {M: 8, N: 6, K: 4}
"""

# DRAM: M outermost (2 steps), N inside (3 steps); Buffer: K=4, M=2 temporal, M=2 and N=2
# spatial over the PEs; each register holds one Z element.
GEMM_MAPPING = """
mapping:
- target: DRAM
  type: temporal
  factors: M=2 N=3 K=1
  permutation: KNM
- target: Buffer
  type: temporal
  factors: M=2 N=1 K=4
  permutation: MKN
- target: Buffer
  type: spatial
  factors: M=2 N=2
  permutation: MN
  split: 1
- target: Reg
  type: temporal
  factors: M=1 N=1 K=1
"""

# A 1-D convolution with stride 2 and a 3-tap window: Inputs[C, 2P + R] (9 rows).
CONV_PROBLEM = """
problem:
  shape:
    name: conv1d
    dimensions: [C, K, R, P]
    coefficients:
    - {name: Wstride, default: 1}
    data-spaces:
    - name: Weights
      projection: [[[C]], [[K]], [[R]]]
    - name: Inputs
      projection:
      - [[C]]
      - [[R], [P, Wstride]]
    - name: Outputs
      projection: [[[K]], [[P]]]
      read-write: True
  instance: {C: 2, K: 2, R: 3, P: 4, Wstride: 2}
"""

# Sliding window at DRAM: P in two steps of two outputs each (input rows [0, 4], [4, 8]).
CONV_MAPPING_TEMPORAL = """
mapping:
- {target: DRAM, type: temporal, factors: P=2, permutation: P}
- {target: Buffer, type: temporal, factors: C=2 K=2 R=3 P=2, permutation: RPKC}
"""

# Windows of neighbouring outputs on two PEs: p and p + 1 need rows [2p, 2p + 2] and
# [2p + 2, 2p + 4], which share row 2p + 2.
CONV_MAPPING_SPATIAL = """
mapping:
- {target: Buffer, type: temporal, factors: C=2 K=2 P=2, permutation: PKC}
- {target: Buffer, type: spatial, factors: P=2, permutation: P}
- {target: Reg, type: temporal, factors: R=3, permutation: R}
"""

# The original TileFlow's format: two chained GEMMs, C = A x B then E = C x D.
CHAIN_PROBLEM = """
problem:
  io: {ins: 'A, B, D', outs: E}
  dimensions: [M, L, K, N]
  instance: {M: 8, L: 6, K: 4, N: 6}
  ops:
  - name: GEMM1
    dimensions: [M, L, K]
    data-spaces:
    - {name: C, projection: [[[M]], [[L]]], read-write: True}
    - {name: A, projection: [[[M]], [[K]]]}
    - {name: B, projection: [[[K]], [[L]]]}
    ins: A, B
    out: C
  - name: GEMM2
    dimensions: [M, L, N]
    data-spaces:
    - {name: E, projection: [[[M]], [[N]]], read-write: True}
    - {name: C, projection: [[[M]], [[L]]]}
    - {name: D, projection: [[[L]], [[N]]]}
    ins: C, D
    out: E
"""

CHAIN_MAPPING = """
mapping:
  node-type: Tile
  type: Temporal
  factors: M=2
  permutation: M
  target: DRAM
  subtree:
  - node-type: Scope
    type: {scope}
    subtree:
    - node-type: Tile
      type: Temporal
      factors: M=4 L=6 K=4
      permutation: KLM
      target: Buffer
      subtree:
      - node-type: Tile
        type: Temporal
        factors: M=1
        target: Reg
        subtree:
        - {{node-type: Op, name: GEMM1, binding: 'M:M L:L K:K'}}
    - node-type: Tile
      type: Temporal
      factors: M=4 N=6 L=6
      permutation: LNM
      target: Buffer
      subtree:
      - node-type: Tile
        type: Temporal
        factors: N=1
        target: Reg
        subtree:
        - {{node-type: Op, name: GEMM2}}
"""


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# A 1-D convolution with output channels on DRAM -> Buffer -> one register file and MAC,
# 8-bit words (no bandwidths given: unlimited, as in Timeloop).
ARCH_ONE_PE = """
architecture:
  version: 0.2
  subtree:
  - name: System
    local:
    - name: DRAM
      class: DRAM
      attributes: {width: 256, block-size: 32, word-bits: 8}
    subtree:
    - name: Chip
      attributes: {technology: 40nm}
      local:
      - name: Buffer
        class: SRAM
        attributes: {depth: 8192, width: 256, block-size: 32, word-bits: 8}
      subtree:
      - name: PE
        local:
        - name: Reg
          class: regfile
          attributes: {depth: 64, width: 8, block-size: 1, word-bits: 8}
        - name: MAC
          class: intmac
          attributes: {datawidth: 8}
"""

CONV_OC_PROBLEM = """
problem:
  shape:
    name: conv1d-oc
    dimensions: [K, R, P]
    data-spaces:
    - {name: Weights, projection: [[[K]], [[R]]]}
    - {name: Inputs, projection: [[[R], [P]]]}
    - {name: Outputs, projection: [[[K]], [[P]]], read-write: True}
  instance: {K: 32, R: 3, P: 16}
"""

CONV_OC_MAPPING = """
mapping:
- {target: Buffer, type: temporal, factors: K=16 P=16, permutation: PK}
- {target: Reg, type: temporal, factors: K=2 R=3, permutation: RK}
"""


# DRAM -> GlobalBuffer (32 words per cycle) -> 256 PEs of one register and one MAC.
ARCH_ARRAY = """
architecture:
  version: 0.4
  nodes:
  - !Container
    name: System
    attributes: {technology: 45nm}
  - !Component
    name: DRAM
    class: DRAM
    attributes: {type: LPDDR4, width: 64, datawidth: 16}
  - !Component
    name: GlobalBuffer
    class: SRAM
    attributes: {depth: 16384, width: 64, datawidth: 16, read_bandwidth: 32}
  - !Container
    name: PE
    spatial: {meshX: 16, meshY: 16}
  - !Component
    name: RegisterFile
    class: regfile
    attributes: {depth: 16, width: 16, datawidth: 16}
  - !Component
    name: MAC
    class: intmac
    attributes: {datawidth: 16}
"""

GEMM_64 = GEMM_PROBLEM.replace("{M: 8, N: 6, K: 4}", "{M: 64, N: 64, K: 64}")

# M:16 x N:16 over the PEs; A and B go from the buffer straight to the MACs.
GEMM_64_BYPASS = """
mapping:
- {target: GlobalBuffer, type: temporal, factors: M=4 N=4 K=64, permutation: KNM}
- {target: GlobalBuffer, type: spatial, factors: M=16 N=16, permutation: MN, split: 1}
- {target: RegisterFile, type: bypass, keep: [Z], bypass: [A, B]}
"""


# A v0.4 design written as the example designs are: MAC widths, a spatial !Container with
# constraints, per-tensor registers in a !Parallel (A kept, Z kept, B fed straight to the
# MACs), an energy-only attribute; 2 x 2 PEs.
ARCH_V04_DESIGN = """
architecture:
  version: 0.4
  nodes:
  - !Container
    name: system
    attributes: {technology: "45nm"}
  - !Component
    name: DRAM
    class: DRAM
    attributes: {type: "LPDDR4", width: 64, datawidth: 16}
  - !Component
    name: glb
    class: smartbuffer_SRAM
    attributes: {depth: 1024, width: 64, n_banks: 4, datawidth: 16, read_bandwidth: 16,
                 write_bandwidth: 16}
    constraints:
      dataspace: {keep: [A, B, Z]}
  - !Container
    name: PE
    spatial: {meshX: 2, meshY: 2}
    constraints:
      spatial: {permutation: [M, N], split: 1}
  - !Parallel
    nodes:
    - !Component
      name: a_reg
      class: storage
      subclass: aladdin_register
      attributes: {depth: 1, width: 16, datawidth: 16}
      constraints: {dataspace: {keep: [A]}}
    - !Component
      name: z_reg
      class: storage
      subclass: aladdin_register
      attributes: {depth: 1, width: 16, datawidth: 16}
    - !Nothing {constraints: {dataspace: {keep: [B]}}}
  - !Component
    name: mac
    class: intmac
    attributes: {multiplier_width: 16, adder_width: 32}
"""

GEMM_PROBLEM_V04 = """
problem:
  version: 0.4
  instance: {M: 8, N: 6, K: 4, H: 1, Hpad: 0}
  shape:
    name: gemm
    dimensions: [M, N, K]
    data_spaces:
    - {name: A, projection: [[[M]], [[K]]]}
    - {name: B, projection: [[[K]], [[N]]]}
    - {name: Z, projection: [[[M]], [[N]]], read_write: true}
"""

# As Timeloop's mapper writes it: innermost level first, the container's stand-in level
# inter_PE_spatial, factors run together (K4).
MAPPING_V04_MAPPER = """
mapping:
- {target: z_reg, type: datatype, keep: [Z], bypass: [A, B]}
- {target: a_reg, type: datatype, keep: [A], bypass: [B, Z]}
- {target: inter_PE_spatial, type: datatype, keep: [], bypass: [A, B, Z]}
- {target: glb, type: dataspace, keep: [A, B, Z], bypass: []}
- {target: DRAM, type: datatype, keep: [A, B, Z], bypass: []}
- {target: z_reg, type: temporal, factors: M1 N1 K1, permutation: MNK}
- {target: a_reg, type: temporal, factors: M1 N3 K1, permutation: NMK}
- {target: inter_PE_spatial, type: spatial, factors: M2 N2 K1, permutation: MNK, split: 1}
- {target: inter_PE_spatial, type: temporal, factors: M1 N1 K1, permutation: MNK}
- {target: glb, type: temporal, factors: M2 N1 K4, permutation: KMN}
- {target: DRAM, type: temporal, factors: M2 N1 K1, permutation: MNK}
"""


# The 2022 example designs' v0.3 layout: the MAC listed before the per-tensor registers of
# its PE, `memory_depth` and `data_storage_depth`, and a depth-0 buffer that only spreads
# the PEs (Timeloop's dummy level).
ARCH_V03_DESIGN = """
architecture:
  version: 0.3
  subtree:
  - name: system
    local:
    - name: DRAM
      class: DRAM
      attributes: {type: LPDDR4, width: 64, block-size: 4, word-bits: 16}
    subtree:
    - name: chip
      attributes: {technology: 45nm}
      local:
      - name: glb
        class: storage
        subclass: smartbuffer_metadata
        attributes: {data_storage_depth: 1024, data_storage_width: 64, block_size: 4,
                     word-bits: 16, metadata_storage_depth: 0}
      - name: dummy[0..1]
        class: storage
        subclass: SRAM
        attributes: {depth: 0, width: 16, word-bits: 16}
      subtree:
      - name: PE[0..3]
        local:
        - name: mac
          class: intmac
          attributes: {datawidth: 16}
        - name: a_reg
          class: reg_storage
          attributes: {depth: 1, width: 16}
        - name: z_reg
          class: reg_storage
          attributes: {depth: 1, width: 16}
"""


# Timeloop's delta rule (`deltas: timeloop`). ARCH_ONE_PE with 16 register files and MACs
# side by side under the Buffer (the 2020 tutorial's exercise 4 machine).
ARCH_16_PES = ARCH_ONE_PE.replace("name: Reg\n", "name: Reg[0..15]\n").replace(
    "name: MAC\n", "name: MAC[0..15]\n")

CONV_OC_IC_PROBLEM = """
problem:
  shape:
    name: conv1d-oc-ic
    dimensions: [C, K, R, P]
    data-spaces:
    - {name: Weights, projection: [[[C]], [[K]], [[R]]]}
    - {name: Inputs, projection: [[[C]], [[R], [P]]]}
    - {name: Outputs, projection: [[[K]], [[P]]], read-write: True}
  instance: {C: 32, K: 32, R: 3, P: 16}
"""

# Input channels across the 16 PEs (partial sums reduced in the Buffer); the Buffer runs
# C:2 (outermost), K:32, R:3 (innermost), each register P:16.
CONV_CP_MAPPING = """
mapping:
- {target: DRAM, type: temporal, factors: R=1 P=1 K=1 C=1, permutation: PRKC}
- {target: Buffer, type: temporal, factors: R=3 P=1 K=32 C=2, permutation: PRKC}
- {target: Buffer, type: spatial, factors: R=1 P=1 K=1 C=16, permutation: PRKC}
- {target: Reg, type: temporal, factors: R=1 P=16 K=1 C=1, permutation: RPKC}
"""

# CONV_PROBLEM with K innermost at DRAM: the Buffer's input window stands still for a step
# (K does not index the inputs), then moves along P.
CONV_STATIONARY_MAPPING = """
mapping:
- {target: DRAM, type: temporal, factors: P=2 K=2, permutation: KP}
- {target: Buffer, type: temporal, factors: C=2 R=3 P=2, permutation: RPC}
"""

# CONV_OC_PROBLEM with DRAM loops P:8 (outer) and R:3: the Buffer's window of 2 input
# rows [2p + r, 2p + r + 1] slides by one row per step of either loop.
CONV_SLIDING_MAPPING = """
mapping:
- {target: DRAM, type: temporal, factors: P=8 R=3, permutation: RP}
- {target: Buffer, type: temporal, factors: K=32 P=2, permutation: PK}
"""

# Two fan-out stages under one buffer, as the Eyeriss-like design writes them: 2 columns
# of 2 PEs (v0.4 containers); the mapper's inter_column_spatial and inter_PE_spatial.
ARCH_TWO_STAGES = """
architecture:
  version: 0.4
  nodes:
  - !Container
    name: system
    attributes: {technology: "45nm"}
  - !Component
    name: DRAM
    class: DRAM
    attributes: {width: 64, datawidth: 16}
  - !Component
    name: glb
    class: SRAM
    attributes: {depth: 1024, width: 64, datawidth: 16}
  - !Container
    name: column
    spatial: {meshX: 2}
  - !Container
    name: PE
    spatial: {meshY: 2}
  - !Component
    name: reg
    class: regfile
    attributes: {depth: 16, width: 16, datawidth: 16}
  - !Component
    name: mac
    class: intmac
    attributes: {width: 16}
"""

# CONV_OC_PROBLEM's shape at K 2, R 2, P 4: the glb runs P:2 (rows 2p ...), the columns
# take neighbouring outputs, the PEs of a column the two taps: PE (q, r) reads row
# 2p + q + r, so PEs (0, 1) and (1, 0) read the same row, in different stages.
CONV_TWO_STAGES_PROBLEM = CONV_OC_PROBLEM.replace("{K: 32, R: 3, P: 16}", "{K: 2, R: 2, P: 4}")
MAPPING_TWO_STAGES = """
mapping:
- {target: reg, type: temporal, factors: K2 R1 P1, permutation: KRP}
- {target: inter_PE_spatial, type: spatial, factors: K1 R2 P1, permutation: RKP}
- {target: inter_column_spatial, type: spatial, factors: K1 R1 P2, permutation: PKR}
- {target: glb, type: temporal, factors: K1 R1 P2, permutation: PKR}
- {target: DRAM, type: temporal, factors: K1 R1 P1, permutation: PKR}
"""


# Accelergy's energy reference table for ARCH_ONE_PE (its v0.4 layout: one table per
# component, named by its path, each action's energy per access; DRAM and Buffer accesses
# move a 32-word block, the register one word; the Buffer leaks). Reg's gated_read and the
# NoC's table have no use in TileFlow: notes of the import's report.
ERT_ONE_PE = """
ERT:
  version: '0.4'
  tables:
  - name: System.DRAM[1..1]
    actions:
    - {name: read, arguments: {global_cycle_seconds: 1e-09}, energy: 3200.0}
    - {name: write, arguments: {global_cycle_seconds: 1e-09}, energy: 2880.0}
    - {name: update, arguments: {global_cycle_seconds: 1e-09}, energy: 2560.0}
  - name: System.Chip.Buffer[1..1]
    actions:
    - {name: write, arguments: {}, energy: 48.0}
    - {name: read, arguments: {}, energy: 64.0}
    - {name: leak, arguments: {}, energy: 0.01}
    - {name: update, arguments: {}, energy: 32.0}
  - name: System.Chip.PE.Reg[1..1]
    actions:
    - {name: read, arguments: {}, energy: 0.5}
    - {name: gated_read, arguments: {}, energy: 0.01}
    - {name: write, arguments: {}, energy: 0.25}
    - {name: update, arguments: {}, energy: 0.125}
  - name: System.Chip.PE.MAC[1..1]
    actions:
    - {name: compute, arguments: {}, energy: 0.75}
  - name: System.Chip.NoC[1..1]
    actions:
    - {name: transfer, arguments: {}, energy: 1.0}
"""

# The 2020-2022 layout (version 0.3): an action per argument variant (Timeloop takes the
# largest), and no update action.
ERT_ONE_PE_V03 = """
ERT:
  version: 0.3
  tables:
  - name: System.Chip.PE.Reg
    actions:
    - {name: read, arguments: {address_delta: 0, data_delta: 0}, energy: 0.125}
    - {name: read, arguments: {address_delta: 1, data_delta: 1}, energy: 0.5}
    - {name: write, arguments: {address_delta: 1, data_delta: 1}, energy: 0.25}
    - {name: idle, arguments: null, energy: 0.01}
  - name: System.Chip.PE.MAC
    actions:
    - {name: mac_random, arguments: null, energy: 0.75}
    - {name: mac_gated, arguments: null, energy: 0.0625}
"""

# The parts of a Timeloop stats.txt the corpus tool reads (current releases): per level the
# tensors' energies and the leakage, the computes and the fJ/Compute total. Buffer: 60 +
# 12.5 + 2.5 = 75 pJ; mac 25 pJ; total 1000 fJ x 100 computes = 100 pJ. The network's
# energy comes after the levels and is not a level's.
STATS_V04 = """
Buffer and Arithmetic Levels
----------------------------
Level 0
-------
=== mac ===

    STATS
    -----
    Computes (total)        : 100
    Energy (total)          : 25.00 pJ

Level 1
-------
=== Buffer ===

    SPECS
    -----
        Leakage energy (total)          : 2.50 pJ

    STATS
    -----
    Weights:
        Utilized instances (max)                 : 2
        Scalar reads (per-instance)              : 50
        Scalar fills (per-instance)              : 10
        Scalar updates (per-instance)            : 0
        Energy (total)                           : 60.00 pJ
        Temporal Reduction Energy (total)        : 0.00 pJ
    Outputs:
        Utilized instances (max)                 : 2
        Scalar reads (per-instance)              : 0
        Scalar fills (per-instance)              : 0
        Scalar updates (per-instance)            : 5
        Energy (total)                           : 12.50 pJ

Networks
--------
Network 0
---------
        Energy (total)                          : 99.00 pJ

Summary Stats
-------------
Cycles: 50
Energy: 0.00 uJ

Computes = 100
fJ/Compute
    mac                                           = 250.00
    Buffer                                        = 750.00
    Total                                         = 1000.00
"""
