"""Accelergy energy reference tables (ERT, the `ERT:` files Timeloop reads beside an
architecture): the energy of each action of each component, read as Timeloop reads them and
written into an imported accelerator's energies per level and action (docs/interop.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tileflow.errors import InputError
from tileflow.interop.report import note
from tileflow.specs.yamlfile import Field

# Timeloop's priority lists (its topology's action mappings): the first ERT action present
# gives the energy of the TileFlow action.
READ_ACTIONS = ("random_read", "read")
FILL_ACTIONS = ("random_fill", "random_write", "fill", "write")
UPDATE_ACTIONS = ("random_update", "random_write", "update", "write")
COMPUTE_ACTIONS = ("mac_random", "mult_random", "mac", "mult", "compute")
LEAK_ACTIONS = ("leak",)
VERSIONS = ("0.3", "0.4")
_RANGE = re.compile(r"\[\d+\.\.\d+\]$")


@dataclass(frozen=True)
class Table:
    """One component's actions: the largest energy over each action's argument variants
    (as Timeloop takes them), in pJ per action (per vector access for a storage)."""

    component: str
    actions: dict[str, float]
    where: Field
    places: dict[str, Field]  # each action's first entry, for the report's notes


@dataclass(frozen=True)
class Ert:
    source: str
    version: str
    tables: dict[str, Table]  # by component name (the last part of Accelergy's path)

    @property
    def one_access_energy(self) -> bool:
        """Version 0.3 tables came with the Timeloop releases (up to 2022) that charged every
        access of a storage at its largest action energy (their 'Vector access energy');
        from version 0.4 each action has its own."""
        return self.version == "0.3"


def is_ert(data: object) -> bool:
    return isinstance(data, dict) and "ERT" in data


def component_name(path: str) -> str:
    """'system_top_level.DRAM[1..1]' -> 'DRAM' (Timeloop matches the last part)."""
    return _RANGE.sub("", path.strip()).rsplit(".", 1)[-1]


def read_ert(doc: Field) -> Ert:
    """The tables of an ERT document; an entry that cannot be read is an error naming it."""
    if not is_ert(doc.data):
        raise InputError("not an Accelergy energy reference table (no 'ERT:' at the top)",
                         doc.source)
    ert = doc.child("ERT").require_mapping()
    ert.check_keys({"version", "tables"}, required={"version", "tables"})
    version = str(ert.get("version")).strip("'\"")
    if version not in VERSIONS:
        raise ert.error(f"ERT version {ert.get('version')!r} is not supported (0.3 or 0.4, "
                        "a list of tables)", "version")
    tables: dict[str, Table] = {}
    for entry in ert.child("tables").elements():
        entry.check_keys({"name", "actions"}, required={"name", "actions"})
        name = entry.string("name")
        component = component_name(name)
        actions: dict[str, float] = {}
        places: dict[str, Field] = {}
        for action in entry.child("actions").elements():
            action.check_keys({"name", "arguments", "energy"}, required={"name", "energy"})
            action_name = action.string("name")
            energy = action.number("energy", positive=False)
            actions[action_name] = max(energy, actions.get(action_name, 0.0))
            places.setdefault(action_name, action)
        if component in tables:
            raise entry.error(f"component '{component}' has two tables (as Timeloop names "
                              "them, by the last part of the path)", "name")
        tables[component] = Table(component, actions, entry, places)
    return Ert(doc.source, version, tables)


def _first(actions: dict[str, float], names: tuple[str, ...]) -> tuple[str, float] | None:
    return next(((n, actions[n]) for n in names if n in actions), None)


def storage_energies(table: Table, block_words: int,
                     one_access_energy: bool) -> dict[str, float] | None:
    """{read, write, update} in pJ per word for a storage level whose access moves
    `block_words` words (Timeloop's block size), or None when the table has no access
    action. The actions read are the first of Timeloop's priority lists and `leak`
    (`leakage_energy`); the others are noted in the import's report."""
    picks = {key: _first(table.actions, names) for key, names in
             (("read", READ_ACTIONS), ("write", FILL_ACTIONS), ("update", UPDATE_ACTIONS))}
    found = {key: pick for key, pick in picks.items() if pick is not None}
    if not found:
        note(table.where, f"ERT table of '{table.component}' has no read, write or update "
             "action: its energies stay TileFlow's", "actions")
        return None
    if one_access_energy:  # ERT 0.3: every access at the largest (Timeloop up to 2022)
        largest = max(energy for _, energy in found.values())
        energies = dict.fromkeys(("read", "write", "update"), largest)
    else:
        read = found.get("read", found.get("write", found.get("update")))
        write = found.get("write", read)
        energies = {"read": read[1], "write": write[1],
                    "update": found.get("update", write)[1]}
        for key in sorted(set(picks) - set(found)):
            stand_in = {"read": read, "write": read, "update": write}[key]
            note(table.where, f"ERT table of '{table.component}' has no {key} action: "
                 f"taken as its '{stand_in[0]}' ({stand_in[1]:g} pJ)", "actions")
    used = {name for name, _ in found.values()} | set(LEAK_ACTIONS)
    _note_unused(table, used, "a storage (dense reads, fills and updates)")
    return {key: value / block_words for key, value in energies.items()}


def leakage_energy(table: Table) -> float:
    """pJ per cycle of one instance (the ERT's `leak`, 0 without one): Timeloop charges it
    for every cycle on each instance of a storage the mapping uses."""
    pick = _first(table.actions, LEAK_ACTIONS)
    return pick[1] if pick is not None else 0.0


def compute_energy(table: Table) -> float | None:
    """pJ per operation of the compute unit (Timeloop's random compute), or None."""
    pick = _first(table.actions, COMPUTE_ACTIONS)
    if pick is None:
        note(table.where, f"ERT table of '{table.component}' has none of the compute actions "
             f"{', '.join(COMPUTE_ACTIONS)}: its energy per operation stays TileFlow's",
             "actions")
        return None
    _note_unused(table, {pick[0]}, "the compute unit (one dense operation)")
    return pick[1]


def _note_unused(table: Table, used: set[str], what: str) -> None:
    for name in table.actions:
        if name in used:
            continue
        if name in LEAK_ACTIONS:
            note(table.places[name], f"ERT action 'leak' of '{table.component}' "
                 f"({table.actions[name]:g} pJ per cycle and instance) not imported: "
                 "Timeloop leaves the compute unit's leakage out of its total", "name")
        else:
            note(table.places[name], f"ERT action '{name}' of '{table.component}' has no "
                 f"use for {what}: not read", "name")


def note_unmatched(ert: Ert, used: set[str]) -> None:
    """Tables of components the architecture does not have as a level or unit."""
    for component, table in ert.tables.items():
        if component not in used:
            note(table.where, f"ERT table of '{component}' matches no storage level or "
                 "compute unit of the architecture: not read", "name")
