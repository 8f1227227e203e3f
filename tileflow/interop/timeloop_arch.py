"""Timeloop architectures (v0.2/v0.3 `subtree`/`local` trees, v0.4 `nodes` lists with
!Container/!Component tags; the original TileFlow uses the same layout) as TileFlow
accelerator descriptions: one storage level per storage component, outermost first,
fan-outs from the instance counts, a matrix unit fed by the innermost storage level."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tileflow.errors import InputError
from tileflow.interop.accelergy import (
    Ert,
    compute_energy,
    leakage_energy,
    note_unmatched,
    storage_energies,
)
from tileflow.interop.report import note, problem
from tileflow.specs.components import ARITHMETIC, DRAM_PJ_PER_BIT
from tileflow.specs.yamlfile import Field

RANGE = re.compile(r"^(.*?)\[(\d+)\.\.(\d+)\]$")
UNLIMITED_WORDS_PER_CYCLE = 1e9  # Timeloop's default: no bandwidth limit

# Attributes that change no count or time in TileFlow (energy/area estimators' details).
NO_EFFECT = {"n_banks", "num-banks", "num_banks", "n_rdwr_ports", "n_rd_ports", "n_wr_ports",
             "num-ports", "num_ports", "cluster_size", "cluster-size",
             "adder_width"}  # an accumulator's width: one word width per tensor here
DEPTH_KEYS = ("depth", "entries", "memory_depth", "data_storage_depth")
WIDTH_KEYS = ("width", "memory_width", "data_storage_width")
STORAGE_KEYS = {"depth", "entries", "memory_depth", "sizeKB", "width", "memory_width",
                "data_storage_depth", "data_storage_width",
                "word-bits", "word_bits", "datawidth", "block-size", "block_size",
                "read_bandwidth", "write_bandwidth", "shared_bandwidth", "multiple_buffering",
                "multiple-buffering", "instances", "meshX", "meshY", "technology", "type",
                "latency", "global_cycle_seconds", "vector-access-energy"} | NO_EFFECT
COMPUTE_KEYS = {"datawidth", "word-bits", "word_bits", "instances", "meshX", "meshY",
                "technology", "latency", "global_cycle_seconds", "width",
                "multiplier_width"} | NO_EFFECT
CONTAINER_KEYS = {"technology", "latency", "global_cycle_seconds", "meshX", "meshY",
                  "datawidth", "word-bits", "word_bits", "width"} | NO_EFFECT


@dataclass
class Component:
    name: str
    cls: str
    attributes: Field
    instances: int
    context: dict = field(default_factory=dict)  # inherited attributes (technology, clock)
    subclass: str = ""


# Per architecture (by its level names): the storage level above each spatial !Container,
# which holds the spatial factors of the mapper's `inter_<container>_spatial` directives.
SPATIAL_HOLDERS: dict[tuple[str, ...], dict[str, str]] = {}


def is_arch(data: object) -> bool:
    return isinstance(data, dict) and "architecture" in data


def convert_arch(doc: Field, ert: Ert | None = None) -> dict:
    """The `architecture:` mapping of a Timeloop file -> a TileFlow accelerator mapping;
    with an Accelergy ERT, its energies per level and action."""
    arch = doc.child("architecture").require_mapping()
    version = arch.get("version")
    holders: dict[str, str] = {}
    components: list[Component] = []
    if arch.has("nodes"):
        arch.check_keys({"version", "nodes"})
        _flatten_v04(arch.child("nodes"), 1, {}, components, holders)
    else:
        arch.check_keys({"version", "subtree", "local"})
        if version is not None and str(version) not in ("0.2", "0.3"):
            raise arch.error(f"architecture version {version} is not supported (0.2, 0.3 with "
                             "'subtree', 0.4 with 'nodes')", "version")
        _flatten_v03(arch, 1, {"first_touch_fills": True}, components)
    components = _without_dummies(_known(components), holders)
    names = tuple(c.name for c in components if _kind(c) != "compute")
    SPATIAL_HOLDERS.setdefault(names, {}).update(holders)
    out = _to_tileflow(components, arch)
    if ert is not None:
        _apply_ert(out, components, ert)
    return out


def _apply_ert(out: dict, components: list[Component], ert: Ert) -> None:
    """Energies per word of each level (the ERT's action energy over the level's block) and
    per operation of the compute unit, from the tables named after the components."""
    used = set()
    levels = {lv["name"]: lv for lv in out["levels"]}
    for c in components:
        table = ert.tables.get(c.name)
        if table is None:
            note(c.attributes, f"'{c.name}' has no table in {ert.source}: its energies stay "
                 "TileFlow's")
            continue
        used.add(c.name)
        if _kind(c) == "compute":
            energy = compute_energy(table)
            if energy is not None:
                out["compute"]["matrix"]["energy_pj_per_op"] = energy
            continue
        level = levels[c.name]
        bits = _word_bits(c.attributes, out["word_bits"])
        energies = storage_energies(table, _block_words(c.attributes, bits),
                                    ert.one_access_energy)
        if energies is not None:
            if "energy_pj_per_word" in level:
                note(c.attributes, f"'vector-access-energy' of '{c.name}' replaced by the "
                     f"energies of {ert.source} (as Timeloop does)", "vector-access-energy")
            level["energy_pj_per_word"] = energies
        leak = leakage_energy(table)
        if leak:  # Timeloop: per cycle on each instance the mapping uses
            level["leakage_pj_per_cycle"] = leak
    note_unmatched(ert, used)


def _block_words(a: Field, bits: int) -> int:
    """Words one access moves (Timeloop's block size): `block-size`, else the width over
    the word, else 1."""
    for key in ("block-size", "block_size"):
        if a.has(key):
            return a.integer(key)
    width = next((a.integer(k, 0, minimum=1) for k in WIDTH_KEYS if a.has(k)), None)
    return max(width // bits, 1) if width else 1


def _storage(c: Component) -> bool:
    """Not the compute (a class the importer does not know counts as storage here; it is
    reported once, by `_known`)."""
    try:
        return _kind(c) != "compute"
    except InputError:
        return True


def _known(components: list[Component]) -> list[Component]:
    """The components of a class the importer knows; the others are problems, gathered so
    that the refusal lists all of them."""
    out = []
    for c in components:
        try:
            _kind(c)
        except InputError as exc:
            problem(exc)
            continue
        out.append(c)
    return out


def _without_dummies(components: list[Component], holders: dict[str, str]) -> list[Component]:
    """A storage of depth 0 holds nothing: Timeloop files use one to spread a fan-out (a
    'DummyBuffer[0..13]'); it is read as a spatial container, its spatial factors held by
    the level above."""
    out: list[Component] = []
    for c in components:
        depth = next((c.attributes.get(k) for k in DEPTH_KEYS if c.attributes.has(k)), None)
        if depth == 0 and _kind(c) not in ("compute", "dram"):
            above = [o.name for o in out if _kind(o) != "compute"]
            if above:
                holders[c.name] = above[-1]
                note(c.attributes, f"'{c.name}' has depth 0: read as a fan-out whose spatial "
                     f"factors '{above[-1]}' holds")
                continue
        out.append(c)
    return out


def _count(name: str) -> tuple[str, int]:
    match = RANGE.match(name.strip())
    if not match:
        return name.strip(), 1
    base, low, high = match.groups()
    return base, int(high) - int(low) + 1


# Spellings of one attribute: the importer reads one, so two given together with different
# values are an error (the same value twice, as some of Timeloop's example designs write
# `depth` and `entries` or `word-bits` and `datawidth`, is read once)
SYNONYMS = (("word-bits", "word_bits", "datawidth"), ("block-size", "block_size"),
            ("multiple_buffering", "multiple-buffering"), ("depth", "entries", "memory_depth"),
            ("width", "memory_width"))


def _attributes(f: Field) -> Field:
    if not f.has("attributes"):
        return Field({}, f.source, f.path)
    attrs = f.child("attributes").require_mapping()
    for group in SYNONYMS:
        given = [k for k in group if attrs.has(k)]
        other = next((k for k in given[1:] if attrs.get(k) != attrs.get(given[0])), None)
        if other is not None:
            raise attrs.error(f"'{given[0]}' ({attrs.get(given[0])}) and '{other}' "
                              f"({attrs.get(other)}) are one attribute: give one", other)
    return attrs


def _inherit(context: dict, attrs: Field) -> dict:
    out = dict(context)
    for key in ("technology", "latency", "global_cycle_seconds"):
        if attrs.has(key):
            out[key] = (attrs.get(key), attrs)
    return out


def _flatten_v03(node: Field, instances: int, context: dict, out: list[Component]) -> None:
    subtrees = node.child("subtree").elements() if node.has("subtree") else []
    if node.has("local"):
        for item in node.child("local").elements():
            _untagged(item)
            local_keys = {"name", "class", "attributes", "subclass", "required_actions"}
            for key in item.keys():
                if key not in local_keys:
                    problem(item.error(f"unknown key '{key}' of a component (expected: "
                                       f"{', '.join(sorted(local_keys))})", key))
            item.check_keys(set(item.keys()), required={"name", "class"})
            base, n = _count(item.string("name"))
            attrs = _attributes(item)
            count = instances * n
            if attrs.has("instances"):
                count = attrs.integer("instances")
            out.append(Component(base, str(item.get("class")), attrs, count,
                                 _inherit(context, attrs), str(item.get("subclass") or "")))
    if len(subtrees) > 1:
        raise node.error("more than one subtree at one place (a heterogeneous hierarchy): "
                         "TileFlow accelerators are one chain of levels", "subtree")
    for sub in subtrees:
        _untagged(sub)
        sub.check_keys({"name", "attributes", "local", "subtree"}, required={"name"})
        _, n = _count(sub.string("name"))
        attrs = _attributes(sub)
        _check_attrs(attrs, CONTAINER_KEYS, "container")
        _flatten_v03(sub, instances * n, _inherit(context, attrs), out)


def _untagged(item: Field) -> None:
    """v0.3 nodes are plain mappings; a v0.4 tag here would be read as if it were not
    there."""
    tag = getattr(getattr(item.data, "tag", None), "value", None)
    if tag:
        raise item.error(f"node tag {tag} belongs to the v0.4 layout (version: 0.4 and a "
                         "'nodes' list); in a v0.3 'subtree'/'local' layout give the node "
                         "without a tag")


NODE_KEYS = {"name", "class", "subclass", "attributes", "spatial", "required_actions",
             "constraints", "enabled", "description", "sparse_optimizations"}


def _flatten_v04(nodes: Field, instances: int, context: dict, out: list[Component],
                 holders: dict[str, str]) -> tuple[int, dict]:
    """The storage and compute components in order (a !Parallel's in the order listed, as
    Timeloop nests them); returns the instances and inherited context after the list."""
    for item in nodes.elements():
        tag = getattr(getattr(item.data, "tag", None), "value", None)
        if tag == "!Nothing":
            continue  # a placeholder in a !Parallel: holds nothing
        if tag == "!Parallel":
            item.check_keys({"nodes", "name", "description"}, required={"nodes"})
            instances, context = _flatten_v04(item.child("nodes"), instances, context, out,
                                              holders)
            continue
        if tag not in ("!Container", "!Component"):
            problem(item.error(f"node tag {tag or '(none)'} is not supported (!Container, "
                               "!Component, !Parallel, !Nothing)"))
            continue
        for key in item.keys():
            if key not in NODE_KEYS:
                problem(item.error(f"unknown key '{key}' of a v0.4 node (expected: "
                                   f"{', '.join(sorted(NODE_KEYS))})", key))
        if item.has("constraints"):
            note(item, "'constraints' are mapper input, not read (TileFlow evaluates the "
                 "mapping given)", "constraints")
        if item.has("sparse_optimizations"):
            note(item, "'sparse_optimizations' not modelled: TileFlow counts dense tensors",
                 "sparse_optimizations")
        if not isinstance(item.get("enabled", True), bool):
            problem(item.error("'enabled' must be true or false", "enabled"))
        if item.get("enabled") is False:
            continue  # a switched-off node, as Timeloop reads it
        attrs = _attributes(item)
        mesh = 1
        if item.has("spatial"):
            spatial = item.child("spatial")
            spatial.check_keys({"meshX", "meshY"})
            mesh = spatial.integer("meshX", 1) * spatial.integer("meshY", 1)
        if tag == "!Container":
            _check_attrs(attrs, CONTAINER_KEYS, "container")
            instances *= mesh
            context = _inherit(context, attrs)
            if item.has("spatial"):
                context["meshX"] = item.child("spatial").get("meshX")
                above = [c.name for c in out if _storage(c)]
                if above:
                    holders[item.string("name")] = above[-1]
        else:
            out.append(Component(item.string("name"), str(item.get("class", "")), attrs,
                                 instances * mesh, _inherit(context, attrs),
                                 str(item.get("subclass") or "")))
    return instances, context


def _check_attrs(attrs: Field, allowed: set[str], what: str) -> None:
    """Attributes TileFlow has no use for (energy estimators' details, metadata storage)
    are noted in the import's report; they never change TileFlow's numbers."""
    for key in attrs.keys():
        if key not in allowed:
            note(attrs, f"attribute '{key}' of a {what} has no effect in TileFlow (read: "
                 f"{', '.join(sorted(allowed - NO_EFFECT))})", key)
        elif key in NO_EFFECT:
            note(attrs, f"attribute '{key}' has no effect on TileFlow's counts", key)


def _kind(c: Component) -> str:
    cls = c.cls.lower()
    if cls == "storage" and c.subclass:  # the subclass names the memory (v0.4)
        cls = c.subclass.lower()
    if "register" in cls:
        return "regfile"
    if "dram" in cls:
        return "dram"
    if "mac" in cls or cls in ("compute", "alu", "multiplier"):
        return "compute"
    if "regfile" in cls or cls.endswith("_rf") or cls.startswith("reg") or cls == "rf":
        return "regfile"
    if any(k in cls for k in ("sram", "storage", "buffer", "cache")):
        return "sram"
    raise c.attributes.error(f"component '{c.name}' has class '{c.cls}', which the importer "
                             "does not know (storage: DRAM, SRAM, regfile, storage; compute: "
                             "intmac, fpmac, mac, compute; networks are not modelled)")


def _word_bits(attrs: Field, default: int) -> int:
    for key in ("word-bits", "word_bits", "datawidth"):
        if attrs.has(key):
            return attrs.integer(key)
    return default


def _technology_nm(components: list[Component]) -> float | None:
    for c in components:
        if "technology" in c.context:
            value, where = c.context["technology"]
            text = str(value).strip().lower().removesuffix("nm").strip()
            try:
                return float(text)
            except ValueError:
                raise where.error(f"cannot read technology {value!r}: expected like '45nm'",
                                  "technology") from None
    return None


def _clock_ghz(components: list[Component]) -> float:
    for c in components:
        if "global_cycle_seconds" in c.context:
            value, where = c.context["global_cycle_seconds"]
            seconds = where.number("global_cycle_seconds", positive=False, maximum=1.0)
            if seconds <= 0:  # below 1 ns for a clock above 1 GHz: any positive time
                raise where.error(f"'global_cycle_seconds' must be positive, got {value!r}",
                                  "global_cycle_seconds")
            return 1e-9 / seconds
        if "latency" in c.context:
            value, where = c.context["latency"]
            match = re.fullmatch(r"\s*([\d.]+)\s*ns\s*", str(value))
            if not match or float(match.group(1)) <= 0:
                raise where.error(f"cannot read latency {value!r}: expected a cycle like "
                                  "'1ns'", "latency")
            return 1.0 / float(match.group(1))
    return 1.0


def _to_tileflow(components: list[Component], where: Field) -> dict:
    storage = [c for c in components if _kind(c) != "compute"]
    compute = [c for c in components if _kind(c) == "compute"]
    if not storage:
        raise where.error("the architecture has no storage component")
    if len(compute) != 1:
        raise where.error(f"expected one compute component (MAC array), found {len(compute)}")
    mac = compute[0]
    _check_attrs(mac.attributes, COMPUTE_KEYS, "compute component")
    for c in storage:
        _check_attrs(c.attributes, STORAGE_KEYS, "storage component")
    word_bits = _word_bits(storage[0].attributes, _word_bits(mac.attributes, 16))
    if word_bits % 8:
        raise storage[0].attributes.error(f"word width {word_bits} bits is not a whole number "
                                          "of bytes")
    tech = _technology_nm(components)
    levels = []
    parent = 1
    for i, c in enumerate(storage):
        if c.instances % parent:
            raise c.attributes.error(f"'{c.name}' has {c.instances} instances, not a multiple "
                                     f"of the {parent} instances of the level above")
        levels.append(_level(c, i == 0, c.instances // parent, word_bits, tech))
        parent = c.instances
    inner = storage[-1]
    if mac.instances % inner.instances:
        raise mac.attributes.error(f"{mac.instances} MACs do not divide among the "
                                   f"{inner.instances} instances of '{inner.name}'")
    per_instance = mac.instances // inner.instances
    fanout = levels[-1].get("fanout", 1)
    mac_bits = _word_bits(mac.attributes, 8)
    if mac_bits % 8:
        raise mac.attributes.error(f"compute '{mac.name}' has a {mac_bits}-bit datawidth, "
                                   "not a whole number of bytes")
    if per_instance == 1:
        cols = (mac.attributes.get("meshX") or inner.attributes.get("meshX")
                or mac.context.get("meshX") or fanout)
        cols = _mesh_columns(cols, fanout, fanout, mac, inner)
        rows = fanout // cols
    elif per_instance == fanout:
        raise mac.attributes.error(f"{per_instance} MACs per '{inner.name}' equals its fan-out "
                                   "(ambiguous for TileFlow's matrix unit); give one MAC per "
                                   "instance of the innermost storage level")
    else:
        cols = _mesh_columns(mac.attributes.get("meshX") or 1, per_instance, 1, mac, mac)
        rows = per_instance // cols
    matrix: dict = {"rows": rows, "cols": cols, "level": inner.name}
    out: dict = {"name": Path(where.source).stem, "clock_ghz": _clock_ghz(components),
                 "word_bits": word_bits, "overlap": "perfect"}  # Timeloop's conventions
    if tech is not None:
        out["technology_nm"] = tech
        precision = _precision(mac)
        if precision:
            matrix["precision"] = precision
    out["levels"] = levels
    out["compute"] = {"matrix": matrix}
    return out


def _mesh_columns(cols, instances: int, default: int, mac: Component,
                  inner: Component) -> int:
    """The columns meshX lays the instances out in: a positive whole number (else an
    error); one that does not divide the instances is reported in the import's notes and
    the instances laid out as Timeloop's mapper would without it (`default` columns)."""
    attrs = next((c.attributes for c in (mac, inner) if c.attributes.has("meshX")),
                 mac.attributes)
    key = "meshX" if attrs.has("meshX") else None
    if not isinstance(cols, int) or isinstance(cols, bool) or cols < 1:
        raise attrs.error(f"meshX must be a whole number >= 1, got {cols!r}", key)
    if instances % cols:
        note(attrs, f"meshX {cols} does not divide the {instances} instances it lays out "
             f"(rows x meshX columns); read as {default} column(s)", key)
        return default
    return cols


def _precision(mac: Component) -> str | None:
    bits = _word_bits(mac.attributes, 0) or next(
        (mac.attributes.integer(k) for k in ("multiplier_width", "width")
         if mac.attributes.has(k)), 0)
    name = f"{'fp' if 'fp' in mac.cls.lower() else 'int'}{bits}"
    return name if name in ARITHMETIC else None


def _level(c: Component, outermost: bool, fanout: int, word_bits: int,
           tech: float | None) -> dict:
    a = c.attributes
    bits = _word_bits(a, word_bits)
    level: dict = {"name": c.name}
    if not outermost:
        level["fanout"] = fanout
    block = None
    for key in ("block-size", "block_size"):
        if a.has(key):
            block = a.integer(key)
    width = next((a.integer(k, 0, minimum=1) for k in WIDTH_KEYS if a.has(k)), None)
    depth = next((a.integer(k) for k in DEPTH_KEYS if a.has(k)), None)
    words = None
    if a.has("sizeKB"):
        words = a.number("sizeKB") * 1024 * 8 / bits
    elif depth is not None:
        per_row = block or (width // bits if width else 1)
        words = depth * max(per_row, 1)
    buffering = next((a.number(k) for k in ("multiple_buffering", "multiple-buffering")
                      if a.has(k)), 1.0)
    if words is not None and _kind(c) != "dram":
        level["capacity_words"] = words * bits / word_bits / buffering
    elif not outermost:
        raise a.error(f"storage '{c.name}' needs 'depth' (or 'entries', 'sizeKB'): only the "
                      "outermost level may be unbounded")
    notes = []
    if a.has("shared_bandwidth"):  # one port: reads and writes together at this rate
        for kind in ("read", "write"):
            if a.has(f"{kind}_bandwidth"):
                notes.append(f"{kind}_bandwidth {a.get(f'{kind}_bandwidth')} beside "
                             "shared_bandwidth: the shared port's rate is used")
            level[f"{kind}_words_per_cycle"] = a.number("shared_bandwidth")
        level["ports"] = "shared"
    else:
        for kind in ("read", "write"):
            key = f"{kind}_bandwidth"
            rate = a.number(key) if a.has(key) else None
            if rate is None:
                notes.append(f"no {kind} bandwidth in Timeloop: unlimited")
            level[f"{kind}_words_per_cycle"] = (rate if rate is not None
                                                else UNLIMITED_WORDS_PER_CYCLE)
    level["writeback_on_read_port"] = False  # Timeloop charges a write-back to the parent
    level["deltas"] = "timeloop"  # its window refetch and per-instance fills
    level["block_words"] = _block_words(a, bits)  # energy in whole accesses per instance
    if not outermost and c.context.get("first_touch_fills"):
        level["first_touch_fills"] = True  # Timeloop 2022 (v0.3 files): fills, no reads
        level["first_touch_reads_parent"] = False
    kind = _kind(c)
    if a.has("vector-access-energy"):
        level["energy_pj_per_word"] = a.number("vector-access-energy", positive=False) / (
            _block_words(a, bits))
    if kind == "dram":
        dram_type = a.get("type")
        if dram_type is not None:
            if dram_type not in DRAM_PJ_PER_BIT:
                raise a.error(f"DRAM type {dram_type!r} is not in the table "
                              f"({', '.join(DRAM_PJ_PER_BIT)})", "type")
            level["dram_type"] = dram_type
    elif tech is not None:
        level["memory"] = kind
        if width and width % word_bits == 0 and width >= word_bits:
            level["access_width_bits"] = width
    if bits != word_bits:
        notes.append(f"capacity in {word_bits}-bit words (Timeloop: {bits}-bit words)")
    if notes:
        level["notes"] = "; ".join(notes)
    return level
