"""One self-contained HTML page of a check, fleet or burn-in document: inline CSS and SVG, no script,
nothing fetched when it is viewed (it is mailed, attached to tickets, opened on air-gapped hosts)."""
from __future__ import annotations

from typing import Dict, List

from . import svg


def _failing_gpus(findings: List[dict]) -> frozenset:
    return frozenset(f["subject"].split()[0] for f in findings
                     if f["severity"] == "fail" and f["subject"].startswith("GPU"))


def _rdma_summary(ports: List[dict]) -> str:
    """'8 InfiniBand port(s) at 400 Gb/s (MT4129, fw 28.39.1002), 2 not active': what a fleet reader compares."""
    groups: Dict[tuple, int] = {}
    for port in ports:
        key = (port.get("link_layer") or "RDMA", port.get("rate_gbps"), port.get("model"), port.get("firmware"))
        groups[key] = groups.get(key, 0) + 1
    parts = [f"{count} {layer} port(s)" + (f" at {rate:g} Gb/s" if rate else "")
             + (f" ({', '.join(filter(None, [model, fw and 'fw ' + fw]))})" if model or fw else "")
             for (layer, rate, model, fw), count in sorted(groups.items(), key=lambda item: -item[1])]
    from ..rules.net import port_active
    from ..snapshot import RdmaDevice
    down = sum(port_active(RdmaDevice(**port)) is False for port in ports)
    return "; ".join(parts) + (f"; {down} not active" if down else "")


def _fabric_facts(snap: dict) -> Dict[str, object]:
    fm, dcgm = snap.get("fabric_manager") or {}, snap.get("dcgm") or {}
    manager = " ".join(filter(None, [fm.get("state"), fm.get("version") and "version " + fm["version"]]))
    return {"Fabric Manager": manager or ("not installed" if fm.get("installed") is False else None),
            "RDMA": _rdma_summary(snap["rdma_devices"]) if snap.get("rdma_devices") else None,
            "DCGM": " ".join(filter(None, [dcgm.get("version"), dcgm.get("health") and "health " + dcgm["health"]]))}


def _host_view(name: str, entry: dict) -> dict:
    if entry.get("status", "checked") != "checked":
        return {"name": name, "status": entry["status"], "problem": entry.get("problem"), "verdict": "fail",
                "findings": [], "topology": "", "facts": {}}
    check = entry["check"]
    snap = check["snapshot"]
    system, software = snap.get("system") or {}, snap.get("software") or {}
    facts = {"OS": " ".join(filter(None, [system.get("os_name"), system.get("os_version")])),
             "kernel": system.get("kernel"), "CPU": system.get("cpu_model"),
             "driver": software.get("driver_version"), "CUDA (driver API)": software.get("cuda_driver_version"),
             "GPUs": ", ".join(sorted({g.get("name") or "?" for g in snap.get("gpus") or []})) or "none",
             **_fabric_facts(snap)}
    gpus = [{"index": g.get("index"), "name": g.get("name"), "bus": g.get("pci_bus_id"),
             "memory": g.get("memory_total_mib"), "temperature": g.get("temperature_c"),
             "power": g.get("power_draw_w"), "limit": g.get("power_limit_w"),
             "pcie": (f"Gen{g.get('pcie_gen_current')} x{g.get('pcie_width_current')}"
                      if g.get("pcie_width_current") else None)} for g in snap.get("gpus") or []]
    xids = [{"code": x.get("code"), "pci": x.get("pci"), "time": x.get("time"), "message": x.get("message")}
            for x in (snap.get("xids") or [])[-50:]]
    return {"name": name, "status": "checked", "problem": None, "verdict": check["verdict"], "gpus": gpus,
            "xids": xids,
            "summary": check["summary"], "facts": {k: v for k, v in facts.items() if v},
            "findings": [f for f in check["findings"] if f["severity"] != "pass"],
            "passed": sum(1 for f in check["findings"] if f["severity"] == "pass"),
            "topology": svg.topology(snap, _failing_gpus(check["findings"]))}


def _context(document: dict) -> Dict[str, object]:
    kind = document["schema"].split("/")[0].split(".")[-1]
    context: Dict[str, object] = {"doc": document, "kind": kind}
    if kind == "fleet":
        context["hosts"] = [_host_view(n, e) for n, e in sorted(document["hosts"].items())]
    elif kind == "check":
        context["hosts"] = [_host_view(document["host"], {"check": document})]
    elif kind == "burnin":
        context["busbw"] = svg.busbw_plot(document["ranks"])
        context["steps"] = svg.step_bars(document["ranks"])
    elif kind == "diagnose":
        context["heatmap"] = svg.step_heatmap(document["ranks"])
    return context


def render(document: dict) -> str:
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("gpuprep.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["svg"] = lambda markup: jinja2.utils.markupsafe.Markup(markup)   # built escaped by svg.py
    return env.get_template("report.html.j2").render(**_context(document))
