"""Timeloop architectures (v0.2/v0.3 `subtree`/`local` trees, v0.4 `nodes` lists with
!Container/!Component tags; the original TileFlow uses the same layout) as TileFlow
accelerator descriptions: one storage level per storage component, outermost first,
fan-outs from the instance counts, a matrix unit fed by the innermost storage level."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tileflow.specs.components import ARITHMETIC, DRAM_PJ_PER_BIT
from tileflow.specs.yamlfile import Field

RANGE = re.compile(r"^(.*?)\[(\d+)\.\.(\d+)\]$")
UNLIMITED_WORDS_PER_CYCLE = 1e9  # Timeloop's default: no bandwidth limit

# Attributes that change no count or time in TileFlow (energy/area estimators' details).
NO_EFFECT = {"n_banks", "num-banks", "num_banks", "n_rdwr_ports", "n_rd_ports", "n_wr_ports",
             "num-ports", "num_ports", "cluster_size", "cluster-size"}
STORAGE_KEYS = {"depth", "entries", "memory_depth", "sizeKB", "width", "memory_width",
                "word-bits", "word_bits", "datawidth", "block-size", "block_size",
                "read_bandwidth", "write_bandwidth", "shared_bandwidth", "multiple_buffering",
                "multiple-buffering", "instances", "meshX", "meshY", "technology", "type",
                "latency", "global_cycle_seconds", "vector-access-energy"} | NO_EFFECT
COMPUTE_KEYS = {"datawidth", "word-bits", "word_bits", "instances", "meshX", "meshY",
                "technology", "latency", "global_cycle_seconds"} | NO_EFFECT
CONTAINER_KEYS = {"technology", "latency", "global_cycle_seconds", "meshX", "meshY",
                  "datawidth", "word-bits", "word_bits", "width"} | NO_EFFECT


@dataclass
class Component:
    name: str
    cls: str
    attributes: Field
    instances: int
    context: dict = field(default_factory=dict)  # inherited attributes (technology, clock)


def is_arch(data: object) -> bool:
    return isinstance(data, dict) and "architecture" in data


def convert_arch(doc: Field) -> dict:
    """The `architecture:` mapping of a Timeloop file -> a TileFlow accelerator mapping."""
    arch = doc.child("architecture").require_mapping()
    version = arch.get("version")
    if arch.has("nodes"):
        arch.check_keys({"version", "nodes"})
        components = _flatten_v04(arch.child("nodes"))
    else:
        arch.check_keys({"version", "subtree", "local"})
        if version is not None and str(version) not in ("0.2", "0.3"):
            raise arch.error(f"architecture version {version} is not supported (0.2, 0.3 with "
                             "'subtree', 0.4 with 'nodes')", "version")
        components = []
        _flatten_v03(arch, 1, {}, components)
    return _to_tileflow(components, arch)


def _count(name: str) -> tuple[str, int]:
    match = RANGE.match(name.strip())
    if not match:
        return name.strip(), 1
    base, low, high = match.groups()
    return base, int(high) - int(low) + 1


# Spellings of one attribute: the importer reads one, so two given together are an error
SYNONYMS = (("word-bits", "word_bits", "datawidth"), ("block-size", "block_size"),
            ("multiple_buffering", "multiple-buffering"), ("depth", "entries", "memory_depth"),
            ("width", "memory_width"))


def _attributes(f: Field) -> Field:
    if not f.has("attributes"):
        return Field({}, f.source, f.path)
    attrs = f.child("attributes").require_mapping()
    for group in SYNONYMS:
        given = [k for k in group if attrs.has(k)]
        if len(given) > 1:
            raise attrs.error(f"'{given[0]}' and '{given[1]}' are one attribute: give one",
                              given[1])
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
            item.check_keys({"name", "class", "attributes", "subclass", "required_actions"},
                            required={"name", "class"})
            base, n = _count(item.string("name"))
            attrs = _attributes(item)
            count = instances * n
            if attrs.has("instances"):
                count = attrs.integer("instances")
            out.append(Component(base, str(item.get("class")), attrs, count,
                                 _inherit(context, attrs)))
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


def _flatten_v04(nodes: Field) -> list[Component]:
    out: list[Component] = []
    instances, context = 1, {}
    for item in nodes.elements():
        tag = getattr(getattr(item.data, "tag", None), "value", None)
        if tag not in ("!Container", "!Component"):
            raise item.error(f"node tag {tag or '(none)'} is not supported: a v0.4 "
                             "architecture here is a list of !Container and !Component nodes")
        item.check_keys({"name", "class", "attributes", "spatial", "required_actions",
                         "constraints", "enabled", "description"}, required={"name"})
        if item.has("constraints"):
            raise item.error("'constraints' are mapper input; TileFlow reads fixed mappings",
                             "constraints")
        if not isinstance(item.get("enabled", True), bool):
            raise item.error("'enabled' must be true or false", "enabled")
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
        else:
            out.append(Component(item.string("name"), str(item.get("class", "")), attrs,
                                 instances * mesh, _inherit(context, attrs)))
    return out


def _check_attrs(attrs: Field, allowed: set[str], what: str) -> None:
    for key in attrs.keys():
        if key not in allowed:
            raise attrs.error(f"attribute '{key}' of a {what} is not supported by the importer "
                              f"(supported: {', '.join(sorted(allowed - NO_EFFECT))})", key)


def _kind(c: Component) -> str:
    cls = c.cls.lower()
    if "dram" in cls:
        return "dram"
    if "mac" in cls or cls in ("compute", "alu", "multiplier"):
        return "compute"
    if "regfile" in cls or cls.endswith("_rf") or cls in ("rf", "reg", "register"):
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
            seconds = where.number("global_cycle_seconds")
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
    if components.index(mac) < components.index(storage[-1]):
        raise mac.attributes.error(f"compute component '{mac.name}' must come after every "
                                   "storage level (it is fed by the innermost one)")
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
        _check_mesh(cols, fanout, mac, inner)
        rows = fanout // cols
    elif per_instance == fanout:
        raise mac.attributes.error(f"{per_instance} MACs per '{inner.name}' equals its fan-out "
                                   "(ambiguous for TileFlow's matrix unit); give one MAC per "
                                   "instance of the innermost storage level")
    else:
        cols = mac.attributes.get("meshX") or 1
        _check_mesh(cols, per_instance, mac, mac)
        rows = per_instance // cols
    matrix: dict = {"rows": rows, "cols": cols, "level": inner.name}
    out: dict = {"name": Path(where.source).stem, "clock_ghz": _clock_ghz(components),
                 "word_bits": word_bits}
    if tech is not None:
        out["technology_nm"] = tech
        precision = _precision(mac)
        if precision:
            matrix["precision"] = precision
    out["levels"] = levels
    out["compute"] = {"matrix": matrix}
    return out


def _check_mesh(cols, instances: int, mac: Component, inner: Component) -> None:
    """meshX must be a whole number that divides the instances it lays out in rows."""
    if isinstance(cols, int) and not isinstance(cols, bool) and cols > 0 and \
            instances % cols == 0:
        return
    attrs = next((c.attributes for c in (mac, inner) if c.attributes.has("meshX")),
                 mac.attributes)
    raise attrs.error(f"meshX {cols!r} does not divide the {instances} instances it "
                      "lays out (rows x meshX columns)", "meshX" if attrs.has("meshX") else None)


def _precision(mac: Component) -> str | None:
    bits = _word_bits(mac.attributes, 0)
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
    width = a.integer("width", 0, minimum=1) if a.has("width") else (
        a.integer("memory_width", 0, minimum=1) if a.has("memory_width") else None)
    depth = next((a.integer(k) for k in ("depth", "entries", "memory_depth") if a.has(k)), None)
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
    shared = a.number("shared_bandwidth") if a.has("shared_bandwidth") else None
    notes = []
    for kind in ("read", "write"):
        key = f"{kind}_bandwidth"
        rate = a.number(key) if a.has(key) else shared
        if rate is None:
            notes.append(f"no {kind} bandwidth in Timeloop: unlimited")
        level[f"{kind}_words_per_cycle"] = rate if rate is not None else UNLIMITED_WORDS_PER_CYCLE
    kind = _kind(c)
    if a.has("vector-access-energy"):
        level["energy_pj_per_word"] = a.number("vector-access-energy", positive=False) / (
            block or 1)
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
