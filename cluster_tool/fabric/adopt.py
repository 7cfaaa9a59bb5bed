"""Adopt a running cluster: read its fabric (`ibnetdiscover`) as it is cabled, and say it in
the spec's words: leaves (SU, rail, GUID) and spines by their own names, each GPU node's
placement, the HCAs cabled elsewhere, the uplinks as they run.

Leaves are the switches GPU nodes' compute HCAs are on; spines the switches those leaves
link to. A leaf's rail is the rail most of its HCAs carry in the node profile, or read from
its name by a leaf-name pattern. SUs are the leaf sets most nodes share: the commonest set of
leaves (one per rail) is an SU, then the next that shares no leaf with one found, and so on;
a leaf left over (half a rail split away) joins the SU most of its nodes are in. A node's SU
and down-port are those most of its HCAs are on. Everything else is a departure, kept as it
is cabled and listed by `cluster_tool.fabric.departures`.
"""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from cluster_tool.errors import UsageError
from cluster_tool.parsers.ibnetdiscover import CA, SWITCH, Fabric
from cluster_tool.spec.models import NodeProfile

_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_SWITCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class HcaSeen:
    """One compute HCA as the fabric shows it: the switch and port it is cabled to."""

    node: str
    hca: str
    rail: int
    switch: str
    port: int


@dataclass
class Adopted:
    """A fabric as it is cabled, in the spec's words (see `spec_fabric`)."""

    leaves: dict[str, tuple[int, int, str | None]]  # name -> (su, rail, guid), primaries first
    spines: dict[str, str | None]  # name -> guid
    placement: dict[str, tuple[int, int]]  # node -> (su, port)
    cables: list[tuple[str, str, str | None, int | None]]  # node, hca, switch, port
    uplinks: list[tuple[str, int, str, int]]
    leaf_ports: int
    spine_ports: int
    su_size: int
    not_adopted: list[str] = field(default_factory=list)  # CA descriptions left out, and why

    def spec_fabric(self) -> dict[str, object]:
        """The `fabric:` keys that say this cabling."""
        return {
            "leaves": {
                name: {"su": su, "rail": rail, **({"guid": guid} if guid else {})}
                for name, (su, rail, guid) in self.leaves.items()
            },
            "spine_switches": {
                name: ({"guid": guid} if guid else {}) for name, guid in self.spines.items()
            },
            "placement": {
                node: {"su": su, "port": port} for node, (su, port) in self.placement.items()
            },
            "cables": [
                {"node": n, "hca": h, **({"leaf": s, "port": p} if s is not None else {})}
                for n, h, s, p in self.cables
            ],
            "uplinks": [list(link) for link in self.uplinks],
        }


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(name)]


def _escaped(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")[:80]


def _guid(value: str | None) -> str | None:
    if value is None or not re.fullmatch(r"[0-9a-f]{1,16}", value.lower().removeprefix("0x")):
        return None
    return "0x" + value.lower().removeprefix("0x").rjust(16, "0")


def pattern_reader(pattern: str) -> re.Pattern[str]:
    """A leaf-name format (`{su:02d}`, `{rail}`, `{rail1}`, `*` for any run) as a regex that
    reads them back."""
    out = []
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise UsageError(f"--leaf-name-pattern: {exc}") from None
    fields = set()
    for literal, name, _spec, _conv in parts:
        # `*` stands for any run of name characters (racks: `A09-`, `B09-`), reading only.
        out.append(".*?".join(re.escape(part) for part in literal.split("*")))
        if name is None:
            continue
        if name not in ("su", "rail", "rail1") or name in fields:
            raise UsageError(
                f"--leaf-name-pattern: field {{{name}}}: use {{su}} and {{rail}} or {{rail1}}, "
                "once each"
            )
        fields.add(name)
        out.append(f"(?P<{name}>[0-9]{{1,4}})")
    if "su" not in fields or not fields & {"rail", "rail1"}:
        raise UsageError("--leaf-name-pattern needs {su} and {rail} (or {rail1})")
    return re.compile("".join(out))


def adopt_fabric(
    fabric: Fabric,
    profile: NodeProfile,
    *,
    switch_name: re.Pattern[str],
    leaf_name_pattern: str | None = None,
) -> Adopted:
    """The fabric as cabled; UsageError (one line) on a fabric that cannot be adopted."""
    names: dict[str, str] = {}  # node id -> switch name
    guid_of: dict[str, str | None] = {}
    ports_of: dict[str, int] = {}
    for record in fabric.nodes:
        if record.kind != SWITCH:
            continue
        match = switch_name.match(record.description.strip())
        name = match.group("name") if match else None
        if name is None or not _SWITCH.fullmatch(name):
            raise UsageError(
                f"switch {_escaped(record.node_id)} (line {record.line_no}): its description "
                f"'{_escaped(record.description)}' holds no switch name the pattern reads"
            )
        if name in guid_of:
            raise UsageError(f"two switches are named {name} (line {record.line_no})")
        names[record.node_id] = name
        guid_of[name] = _guid(record.guid)
        # `Switch 65`: 64 cabled ports and port 0 (a switch's own; 65 on a QM9701 is its
        # SHARP aggregation node's): the spec counts what can be cabled, or what is.
        ports_of[name] = max(record.number_of_ports - 1, 1)
    if not names:
        raise UsageError("no switch in the fabric: nothing to adopt")

    rail_of = {h.device: h.rail for h in profile.hcas}
    seen: dict[tuple[str, str], HcaSeen] = {}
    not_adopted: list[str] = []

    def take(description: str, peer_id: str, peer_port: int) -> None:
        host, _, device = description.strip().rpartition(" ")
        switch = names.get(peer_id)
        label = _escaped(description)
        if switch is None:
            not_adopted.append(f"'{label}': not cabled to a switch")
        elif not _HOST.fullmatch(host):
            not_adopted.append(f"'{label}': not a `host device` node description")
        elif device not in rail_of:
            not_adopted.append(f"'{label}': {_escaped(device)} is not a compute HCA of the profile")
        elif (host, device) in seen:
            not_adopted.append(f"'{label}': a second port of the same name")
        else:
            seen[(host, device)] = HcaSeen(host, device, rail_of[device], switch, peer_port)

    listed: set[str] = set()
    for record in fabric.nodes:
        if record.kind == CA:
            listed.add(record.node_id)
            for p in record.ports:
                take(record.description, p.peer_id, p.peer_port)
    for record in fabric.nodes:  # a CA seen only from its switch
        if record.kind != SWITCH:
            continue
        for p in record.ports:
            if p.peer_id.startswith("H-") and p.peer_id not in listed and p.peer_description:
                take(p.peer_description, record.node_id, p.port)
    if not seen:
        raise UsageError(
            "no compute HCA of the profile in the fabric (node descriptions `host mlx5_N` "
            f"naming {', '.join(sorted(rail_of))}): nothing to adopt"
        )

    on_leaf: dict[str, list[HcaSeen]] = defaultdict(list)
    for hca in seen.values():
        on_leaf[hca.switch].append(hca)
    leaf_names = sorted(on_leaf, key=_natural)
    place = (
        _read_names(leaf_names, leaf_name_pattern)
        if leaf_name_pattern
        else _infer_places(leaf_names, on_leaf, seen)
    )

    # Uplinks from the leaf's side; spines are the non-leaves the leaves link to.
    uplinks: list[tuple[str, int, str, int]] = []
    spines: dict[str, str | None] = {}
    by_id = {r.node_id: r for r in fabric.nodes}
    for node_id, name in names.items():
        if name not in on_leaf:
            continue
        for p in by_id[node_id].ports:
            peer = names.get(p.peer_id)
            if peer is None or peer in on_leaf:
                continue  # a CA, or a leaf-to-leaf cable (not a two-tier uplink)
            uplinks.append((name, p.port, peer, p.peer_port))
            spines[peer] = guid_of[peer]
    uplinks.sort(key=lambda u: (_natural(u[0]), u[1]))
    spine_order = sorted(spines, key=_natural)

    # Each node: the SU most of its HCAs are on, the port most of them use there.
    by_node: dict[str, list[HcaSeen]] = defaultdict(list)
    for hca in seen.values():
        by_node[hca.node].append(hca)
    count_on = Counter(h.switch for h in seen.values())
    primary: dict[tuple[int, int], str] = {}
    for name in sorted(on_leaf, key=lambda n: (-count_on[n], _natural(n))):
        primary.setdefault(place[name], name)
    placement: dict[str, tuple[int, int]] = {}
    cables: list[tuple[str, str, str | None, int | None]] = []
    for node in sorted(by_node, key=_natural):
        hcas = sorted(by_node[node], key=lambda h: h.rail)
        su = Counter(place[h.switch][0] for h in hcas).most_common(1)[0][0]
        home = [h for h in hcas if place[h.switch][0] == su]
        port = Counter(h.port for h in home).most_common(1)[0][0]
        placement[node] = (su, port)
        for dev, rail in sorted(rail_of.items(), key=lambda kv: kv[1]):
            h = seen.get((node, dev))
            if h is None:
                cables.append((node, dev, None, None))
            elif (h.switch, h.port) != (primary.get((su, rail)), port):
                cables.append((node, dev, h.switch, h.port))
    placement = dict(sorted(placement.items(), key=lambda kv: (kv[1], _natural(kv[0]))))
    leaves = {
        name: (*place[name], guid_of[name])
        for name in sorted(on_leaf, key=lambda n: (place[n], -count_on[n], _natural(n)))
    }
    per_su = Counter(su for su, _ in placement.values())
    return Adopted(
        leaves=leaves,
        spines={name: spines[name] for name in spine_order},
        placement=placement,
        cables=cables,
        uplinks=uplinks,
        leaf_ports=max(
            [*(ports_of[n] for n in on_leaf), *(h.port for h in seen.values())]
            + [u[1] for u in uplinks]
        ),
        spine_ports=max(
            [*(ports_of[n] for n in spines), *(u[3] for u in uplinks)],
            default=max(ports_of.values()),
        ),
        su_size=max(per_su.values()),
        not_adopted=not_adopted,
    )


def _read_names(leaves: list[str], pattern: str) -> dict[str, tuple[int, int]]:
    reader = pattern_reader(pattern)
    out = {}
    for name in leaves:
        match = reader.fullmatch(name)
        if match is None:
            raise UsageError(f"leaf {name} does not fit --leaf-name-pattern {pattern}")
        values = match.groupdict()
        su = int(values["su"])
        rail = int(values["rail"]) if values.get("rail") is not None else int(values["rail1"]) - 1
        if su < 1 or rail < 0:
            raise UsageError(f"leaf {name}: SU {su}, rail {rail} (SUs count from 1)")
        out[name] = (su, rail)
    return out


def _infer_places(
    leaves: list[str],
    on_leaf: dict[str, list[HcaSeen]],
    seen: dict[tuple[str, str], HcaSeen],
) -> dict[str, tuple[int, int]]:
    rail = {
        name: min(
            Counter(h.rail for h in on_leaf[name]).most_common(), key=lambda c: (-c[1], c[0])
        )[0]
        for name in leaves
    }
    key_of: dict[str, list[str]] = defaultdict(list)
    for h in sorted(seen.values(), key=lambda h: h.rail):
        key_of[h.node].append(h.switch)
    keys = Counter(tuple(sorted(set(v), key=_natural)) for v in key_of.values())
    su_of: dict[str, int] = {}
    groups: list[tuple[str, ...]] = []
    for key, _count in sorted(keys.items(), key=lambda kv: (-kv[1], [_natural(n) for n in kv[0]])):
        if any(name in su_of for name in key) or len({rail[n] for n in key}) != len(key):
            continue
        groups.append(key)
        for name in key:
            su_of[name] = len(groups)
    # A leaf outside every SU found: the SU most of its nodes' other leaves are in.
    for name in leaves:
        if name in su_of:
            continue
        votes: Counter[int] = Counter()
        for h in on_leaf[name]:
            votes.update(su_of[s] for s in key_of[h.node] if s in su_of)
        if votes:
            su_of[name] = min(votes.most_common(), key=lambda c: (-c[1], c[0]))[0]
        else:
            groups.append((name,))
            su_of[name] = len(groups)
    # Number SUs as their leaves' names sort (their lowest-rail leaf first).
    firsts: dict[int, str] = {}
    for name in leaves:
        su = su_of[name]
        best = firsts.get(su)
        if best is None or (rail[name], _natural(name)) < (rail[best], _natural(best)):
            firsts[su] = name
    order = sorted(firsts, key=lambda su: _natural(firsts[su]))
    number = {su: i for i, su in enumerate(order, start=1)}
    return {name: (number[su_of[name]], rail[name]) for name in leaves}
