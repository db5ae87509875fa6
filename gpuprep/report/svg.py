"""Pictures for the HTML report as inline SVG (the page must work with no network): a host's GPU topology
(NUMA nodes holding their GPUs and NICs, NVLink and PCIe links between them), the burn-in's bus bandwidth
by message size, and each rank's step time. Pure functions of a document's dicts; every text is escaped."""
from __future__ import annotations

import math
from html import escape
from typing import Dict, List, Optional, Tuple

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_BOX_W, _BOX_H, _GAP = 112, 44, 14
_NAME_CHARS = 20        # "H100 80GB HBM3", "A100-SXM4-80GB", "RTX PRO 6000 Blac..."


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "middle", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}">'
            f'{escape(str(text))}</text>')


def _gpu_devices(snapshot: dict, affinity: dict) -> List[dict]:
    out = []
    for gpu in snapshot.get("gpus") or []:
        key = f"GPU{gpu['index']}" if gpu.get("index") is not None else (gpu.get("pci_bus_id") or "GPU?")
        node = gpu.get("numa_node") if gpu.get("numa_node") is not None else affinity.get(key)
        name = (gpu.get("name") or "").replace("NVIDIA ", "")
        out.append({"key": key, "label": key, "sub": name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS - 1] + "…",
                    "kind": "gpu", "node": node})
    return out


def _nearest_gpu_node(links: dict, gpus: Dict[str, dict]) -> Optional[int]:
    """topo -m gives no NUMA node for NICs: the node of a GPU the NIC reaches without crossing sockets."""
    near = [gpus[g]["node"] for g, link in links.items()
            if g in gpus and link in ("PIX", "PXB", "PHB", "NODE") and gpus[g]["node"] is not None]
    return near[0] if near else None


def _topo_nics(topo: dict, rdma: Dict[str, dict], gpus: Dict[str, dict]) -> List[dict]:
    out = []
    matrix, names = topo.get("matrix") or {}, topo.get("nic_names") or {}
    for nic in (d for d in topo.get("devices") or [] if d.startswith("NIC")):
        name = names.get(nic, nic)
        node = (rdma.get(name) or {}).get("numa_node")
        if node is None:
            node = _nearest_gpu_node(matrix.get(nic) or {}, gpus)
        out.append({"key": nic, "label": name[:10], "sub": nic, "kind": "nic", "node": node})
    return out


def _devices(snapshot: dict) -> Tuple[Dict[Optional[int], List[dict]], Dict[str, dict]]:
    """NUMA node -> its GPUs and NICs (each {"key", "label", "kind", "bad"}), and the same by key. NICs come from
    topo -m where it names them, else from the RDMA devices in /sys."""
    topo = snapshot.get("topology") or {}
    rdma = {d["name"]: d for d in snapshot.get("rdma_devices") or []}
    gpus = {d["key"]: d for d in _gpu_devices(snapshot, topo.get("numa_affinity") or {})}
    nics = _topo_nics(topo, rdma, gpus) or [
        {"key": dev["name"], "label": dev["name"][:10], "sub": dev.get("link_layer") or "", "kind": "nic",
         "node": dev.get("numa_node")} for dev in rdma.values()]
    by_node: Dict[Optional[int], List[dict]] = {}
    for device in list(gpus.values()) + nics:
        by_node.setdefault(device["node"], []).append(device)
    for node in snapshot.get("numa_nodes") or []:
        by_node.setdefault(node["node"], [])
    return by_node, {d["key"]: d for d in list(gpus.values()) + nics}


def topology(snapshot: dict, bad_gpus: frozenset = frozenset()) -> str:
    """The host's topology picture; '' when the snapshot knows no GPU and no NIC."""
    by_node, by_key = _devices(snapshot)
    if not by_key:
        return ""
    nodes = sorted(by_node, key=lambda n: (n is None, n if n is not None else 0))
    x, regions, boxes, positions = 10.0, [], [], {}
    span = sum(max(1, len(by_node[n])) for n in nodes)       # the widest arc's lift decides the room above
    top, height = 40.0 + _lift(span) / 2, 2 * _BOX_H + 3 * _GAP + 24
    for node in nodes:
        gpus = [d for d in by_node[node] if d["kind"] == "gpu"]
        nics = [d for d in by_node[node] if d["kind"] == "nic"]
        columns = max(len(gpus), len(nics), 1)
        width = columns * (_BOX_W + _GAP) + _GAP
        title = f"NUMA node {node}" if node is not None else "NUMA node unknown"
        regions.append(f'<rect class="numa" x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" height="{height:.1f}" '
                       f'rx="8" fill="#f4f6fa" stroke="#8899aa"/>' + _text(x + 8, top + 16, title, 12, "start", "bold"))
        for row, devices in ((0, gpus), (1, nics)):
            for i, device in enumerate(devices):
                bx = x + _GAP + i * (_BOX_W + _GAP)
                by = top + 24 + _GAP + row * (_BOX_H + _GAP)
                positions[device["key"]] = (bx + _BOX_W / 2, by)
                fill = "#f8d7da" if device["key"] in bad_gpus else ("#d9f2d9" if device["kind"] == "gpu" else "#dde8f8")
                boxes.append(f'<rect class="{device["kind"]}" x="{bx:.1f}" y="{by:.1f}" width="{_BOX_W}" '
                             f'height="{_BOX_H}" rx="5" fill="{fill}" stroke="#445"/>'
                             + _text(bx + _BOX_W / 2, by + 18, device["label"], 12, weight="bold")
                             + _text(bx + _BOX_W / 2, by + 34, device["sub"], 9))
        x += width + 20
    links = _links(snapshot, positions)
    width, full_height = x, top + height + 30
    legend = (_text(10, 20, "NVLink (width: links)", 11, "start") +
              '<line x1="150" y1="16" x2="190" y2="16" stroke="#2a7" stroke-width="3"/>' +
              _text(205, 20, "PCIe switch (PIX/PXB)", 11, "start") +
              '<line x1="345" y1="16" x2="385" y2="16" stroke="#c60" stroke-width="2" stroke-dasharray="5,3"/>')
    # NUMA regions first, then the links, then the devices: a link under an opaque region was invisible (an 8-GPU
    # NV18 mesh showed as one stub)
    return (f'<svg class="topology" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{full_height:.0f}" '
            f'viewBox="0 0 {width:.0f} {full_height:.0f}">' + legend + "".join(regions) + "".join(links) +
            "".join(boxes) + "</svg>")


def _lift(boxes_apart: float) -> float:
    """How far an NVLink arc rises: further apart, higher, so the arcs of a mesh stay apart."""
    return 24 + 14 * boxes_apart


def _links(snapshot: dict, positions: Dict[str, tuple]) -> List[str]:
    matrix = (snapshot.get("topology") or {}).get("matrix") or {}
    out, seen = [], set()
    for a, row in sorted(matrix.items()):
        for b, kind in sorted(row.items()):
            pair = tuple(sorted((a, b)))
            if a == b or pair in seen or a not in positions or b not in positions:
                continue
            seen.add(pair)
            (xa, ya), (xb, yb) = positions[pair[0]], positions[pair[1]]
            if kind.startswith("NV"):
                count = int(kind[2:]) if kind[2:].isdigit() else 1
                lift = _lift(abs(xb - xa) / (_BOX_W + _GAP))
                out.append(f'<path class="nvlink" d="M{xa:.1f},{ya:.1f} Q{(xa + xb) / 2:.1f},{ya - lift:.1f} '
                           f'{xb:.1f},{yb:.1f}" fill="none" stroke="#2a7" stroke-opacity="0.7" '
                           f'stroke-width="{min(1 + math.log2(count + 1), 6):.1f}"/>')
            elif kind in ("PIX", "PXB"):
                out.append(f'<line class="pcie" x1="{xa:.1f}" y1="{ya:.1f}" x2="{xb:.1f}" y2="{yb:.1f}" '
                           f'stroke="#c60" stroke-width="2" stroke-dasharray="5,3"/>')
    return out


def _size_label(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} B"


def busbw_plot(ranks: List[dict], width: int = 640, height: int = 300) -> str:
    """All-reduce bus bandwidth by message size, one line per rank (log2 size axis)."""
    series = [(r, [(p["bytes"], p["busbw_gbs"]) for p in r.get("allreduce") or []
                   if p.get("bytes") and p.get("busbw_gbs") is not None]) for r in ranks]
    series = [(r, pts) for r, pts in series if pts]
    if not series:
        return ""
    sizes = sorted({s for _, pts in series for s, _ in pts})
    top = max(v for _, pts in series for _, v in pts) or 1.0
    left, right, upper, lower = 60, width - 20, 20, height - 50
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    span = (hi - lo) or 1.0

    def px(size: int, value: float) -> Tuple[float, float]:
        return (left + (math.log2(size) - lo) / span * (right - left), lower - value / top * (lower - upper))
    parts = [f'<line x1="{left}" y1="{lower}" x2="{right}" y2="{lower}" stroke="#333"/>',
             f'<line x1="{left}" y1="{upper}" x2="{left}" y2="{lower}" stroke="#333"/>',
             _text(left - 8, upper + 4, f"{top:.1f}", 10, "end"), _text(left - 8, lower, "0", 10, "end"),
             _text((left + right) / 2, height - 8, "message size", 11),
             _text(14, (upper + lower) / 2, "GB/s", 11)]
    for size in sizes[:: max(1, len(sizes) // 6)]:
        x, _ = px(size, 0)
        parts.append(_text(x, lower + 16, _size_label(size), 10))
    for i, (rank, pts) in enumerate(series):
        colour = _PALETTE[i % len(_PALETTE)]
        points = " ".join("{:.1f},{:.1f}".format(*px(s, v)) for s, v in pts)
        parts.append(f'<polyline class="busbw" points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(_text(right - 4, upper + 14 * (i + 1), f"rank {rank['rank']}", 10, "end"))
        parts.append(f'<rect x="{right}" y="{upper + 14 * (i + 1) - 8}" width="10" height="8" fill="{colour}"/>')
    return (f'<svg class="busbw-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def step_bars(ranks: List[dict], width: int = 640) -> str:
    """Each rank's median step time as a bar; the slowest rank's bar is red."""
    values = [(r, r.get("median_step_ms")) for r in ranks if r.get("median_step_ms") is not None]
    if not values:
        return ""
    longest = max(v for _, v in values) or 1.0
    bar_h, left = 22, 170
    height = len(values) * (bar_h + 6) + 20
    parts = []
    for i, (rank, value) in enumerate(values):
        y = 10 + i * (bar_h + 6)
        length = value / longest * (width - left - 80)
        colour = "#d62728" if value == longest and len(values) > 1 else "#1f77b4"
        parts.append(_text(left - 6, y + 15, f"rank {rank['rank']} {rank.get('host', '')}"[:28], 11, "end"))
        parts.append(f'<rect class="step" x="{left}" y="{y}" width="{max(length, 1):.1f}" height="{bar_h}" '
                     f'fill="{colour}"/>')
        parts.append(_text(left + length + 6, y + 15, f"{value:.1f} ms", 11, "start"))
    return (f'<svg class="step-bars" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")


def step_heatmap(ranks: List[dict], cell: int = 14, left: int = 190) -> str:
    """One row per rank, one cell per step, coloured by the step's time against the job's median step (white at
    the median or below, red at twice it): a slow rank is a red row, a slow step a red column."""
    rows = [(r, r.get("step_ms_each") or []) for r in ranks if r.get("step_ms_each")]
    if not rows:
        return ""
    import statistics
    median = statistics.median(v for _, values in rows for v in values) or 1.0
    steps = max(len(values) for _, values in rows)
    width, height = left + steps * cell + 20, len(rows) * cell + 30
    parts = [_text(left, 12, f"step time against the median ({median:.1f} ms): white at or below, red at 2x", 10,
                   "start")]
    for i, (rank, values) in enumerate(rows):
        y = 20 + i * cell
        who = f"rank {rank['rank']}" if rank.get("rank") is not None else str(rank.get("source", "?")).rsplit("/", 1)[-1]
        parts.append(_text(left - 6, y + cell - 3, who[:30], 10, "end"))
        for j, value in enumerate(values):
            heat = max(0.0, min(1.0, value / median - 1.0))
            shade = int(255 * (1 - heat))
            parts.append(f'<rect class="step-cell" x="{left + j * cell}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="rgb(255,{shade},{shade})" stroke="#ccc"><title>{value:.1f} ms</title></rect>')
    return (f'<svg class="step-heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">' + "".join(parts) + "</svg>")
