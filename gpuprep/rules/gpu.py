"""gpu.*: the state of each GPU — errors in the kernel log, memory health, clocks, power, links."""
from __future__ import annotations

from collections import Counter, OrderedDict

from .. import knowledge as kb
from ..snapshot import normalize_bus_id
from . import Finding, all_gpus, gpu_subject, host, rule

_XID_SOURCE = "NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)"
_RESOLUTION = {
    "IGNORE": ("info", "informational; no action needed unless it repeats"),
    "RESTART_APP": ("warn", "restart the application"),
    "RESET_GPU": ("fail", "drain the GPU and reset it: `nvidia-smi -r -i {index}`"),
    "RESTART_BM": ("fail", "drain and reboot the host"),
    "RESTART_VM": ("fail", "drain and reboot the VM"),
    "CONTACT_SUPPORT": ("fail", "drain the node and contact NVIDIA/your vendor support"),
}
_CLASS = {"fatal": "fail", "app": "warn", "info": "info"}
_HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
_RETIRED_PAGE_LIMIT = 64   # NVIDIA: a board may retire up to 64 pages; RMA well before that
_RETIRED_PAGE_NEAR = 60


@rule
def xid(snap, ctx):
    events = snap.xids or []
    groups = OrderedDict()
    for event in events:
        key = (event.kind, event.code, normalize_bus_id(event.pci) if event.pci else None)
        groups.setdefault(key, []).append(event)
    findings = []
    for (kind, code, pci), seen in groups.items():
        gpu = snap.gpu_by_bus(pci) if pci else None
        subject = gpu_subject(gpu) if gpu else (f"PCI {pci}" if pci else host(snap))
        if kind == "sxid":
            row = kb.sxid_catalog().get(code, {})
            severity = _CLASS.get(row.get("severity_class", ""), "warn")
            remedy = row.get("nvidia_recovery") or "see NVIDIA Fabric Manager guide, appendix D"
            title = f"NVSwitch SXid {code} ({row.get('name', 'unknown')}) seen {len(seen)}x"
            source = row.get("source")
        else:
            row = kb.xid_catalog().get(code, {})
            resolution = row.get("nvidia_resolution", "")
            severity, action = _RESOLUTION.get(resolution, (_CLASS.get(row.get("severity_class", ""), "warn"),
                                                             f"follow NVIDIA's {resolution or 'catalog'} guidance"))
            remedy = action.format(index=gpu.index if gpu else "<gpu>")
            title = f"Xid {code} ({row.get('description', 'not in the catalog')}) seen {len(seen)}x"
            source = _XID_SOURCE
        evidence = {"code": code, "count": len(seen), "pci": pci, "last": seen[-1].time,
                    "message": seen[-1].message}
        findings.append(Finding(f"gpu.{kind}", severity, subject, title, evidence, remedy, source))
    return findings


@rule
def persistence(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.persistence_mode is False:
            out.append(Finding("gpu.persistence-off", "warn", gpu_subject(gpu), "Persistence mode is off",
                               {"persistence_mode": "Disabled"},
                               "gpuprep apply --tags gpu_persistence (nvidia-persistenced --persistence-mode)",
                               "NVIDIA driver persistence documentation"))
        elif gpu.persistence_mode:
            out.append(Finding("gpu.persistence-off", "pass", gpu_subject(gpu), "Persistence mode is on"))
    return out


@rule
def app_clocks(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if None in (gpu.app_clock_graphics_mhz, gpu.max_clock_graphics_mhz):
            continue   # GPU without application clocks (GeForce, many workstation boards)
        evidence = {"app_graphics_mhz": gpu.app_clock_graphics_mhz, "max_graphics_mhz": gpu.max_clock_graphics_mhz,
                    "app_mem_mhz": gpu.app_clock_mem_mhz, "max_mem_mhz": gpu.max_clock_mem_mhz}
        if gpu.app_clock_graphics_mhz < gpu.max_clock_graphics_mhz:
            out.append(Finding("gpu.app-clocks-below-max", "warn", gpu_subject(gpu),
                               f"Application clocks {gpu.app_clock_graphics_mhz} MHz below max "
                               f"{gpu.max_clock_graphics_mhz} MHz", evidence,
                               "gpuprep apply --tags gpu_clocks (locks clocks; application clocks are deprecated in NVML)",
                               "nvidia-smi -q CLOCK section; NVML deprecation of application clocks"))
        else:
            out.append(Finding("gpu.app-clocks-below-max", "pass", gpu_subject(gpu),
                               "Application clocks at max", evidence))
    return out


@rule
def throttle(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        reasons = gpu.clock_event_reasons
        if reasons is None:
            continue
        hard = [r for r in reasons if r in _HW_THROTTLE]
        if hard:
            out.append(Finding("gpu.clock-throttle", "fail", gpu_subject(gpu),
                               "GPU clocks held down by " + ", ".join(hard),
                               {"active_reasons": reasons, "temperature_c": gpu.temperature_c,
                                "power_draw_w": gpu.power_draw_w},
                               "Check cooling, power supply and power brake signals; drain if it persists",
                               "NVML clocks event reasons"))
        elif "sw_power_cap" in reasons:
            idle = "gpu_idle" in reasons or (gpu.power_draw_w is not None and gpu.power_limit_w and
                                             gpu.power_draw_w < 0.5 * gpu.power_limit_w)
            out.append(Finding("gpu.clock-throttle", "info" if idle else "warn", gpu_subject(gpu),
                               "Software power cap active" + (" while idle" if idle else ""),
                               {"active_reasons": reasons, "power_draw_w": gpu.power_draw_w,
                                "power_limit_w": gpu.power_limit_w},
                               None if idle else "Raise the power limit (`gpuprep apply --tags gpu_clocks -e gpu_clocks_power_limit=...`)"))
        else:
            out.append(Finding("gpu.clock-throttle", "pass", gpu_subject(gpu), "No clock throttling",
                               {"active_reasons": reasons}))
    return out


@rule
def ecc(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.ecc_mode_current is False:
            pending = gpu.ecc_mode_pending
            model = kb.gpu_model(gpu.name) or {}
            severity = "warn" if model.get("datacenter", "yes") == "yes" or ctx.profile.get("require_ecc") else "info"
            out.append(Finding("gpu.ecc-disabled", severity, gpu_subject(gpu),
                               "ECC is disabled" + (" (enabled after the next reset)" if pending else ""),
                               {"ecc_current": False, "ecc_pending": pending},
                               f"nvidia-smi -i {gpu.index} -e 1 && reboot (or reset the GPU)",
                               "nvidia-smi -q ECC section"))
        unc = gpu.ecc_volatile_uncorrected
        if unc:
            out.append(Finding("gpu.ecc-uncorrectable", "fail", gpu_subject(gpu),
                               f"{unc} uncorrectable ECC error(s) since the last driver load",
                               {"volatile_uncorrected": unc, "aggregate_uncorrected": gpu.ecc_aggregate_uncorrected},
                               "Drain the GPU, reset it (`nvidia-smi -r`) and run `dcgmi diag -r 3`; RMA if it recurs",
                               "NVIDIA GPU memory error management guide"))
        elif unc == 0:
            out.append(Finding("gpu.ecc-uncorrectable", "pass", gpu_subject(gpu), "No uncorrectable ECC errors"))
    return out


@rule
def row_remap(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.remapped_rows_pending is None and gpu.remapped_rows_failure is None:
            continue
        evidence = {"correctable": gpu.remapped_rows_correctable, "uncorrectable": gpu.remapped_rows_uncorrectable,
                    "pending": gpu.remapped_rows_pending, "failure": gpu.remapped_rows_failure}
        source = "NVIDIA GPU memory error management (row remapping)"
        if gpu.remapped_rows_failure:
            out.append(Finding("gpu.row-remap", "fail", gpu_subject(gpu), "Row remapping failed: no spare rows left",
                               evidence, "Drain the node and RMA the GPU", source))
        elif gpu.remapped_rows_pending:
            out.append(Finding("gpu.row-remap", "fail", gpu_subject(gpu), "A row remap is pending",
                               evidence, f"Drain and reset the GPU (`nvidia-smi -r -i {gpu.index}`) to apply it",
                               source))
        elif (gpu.remapped_rows_uncorrectable or 0) > 512:
            out.append(Finding("gpu.row-remap", "fail", gpu_subject(gpu),
                               f"{gpu.remapped_rows_uncorrectable} rows remapped for uncorrectable errors",
                               evidence, "Plan an RMA", "Azure HPC health checks threshold (512)"))
        else:
            out.append(Finding("gpu.row-remap", "pass", gpu_subject(gpu), "No pending or failed row remaps",
                               evidence))
    return out


@rule
def retired_pages(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.retired_pages_pending is None and gpu.retired_pages_double_bit is None:
            continue
        total = (gpu.retired_pages_single_bit or 0) + (gpu.retired_pages_double_bit or 0)
        evidence = {"single_bit": gpu.retired_pages_single_bit, "double_bit": gpu.retired_pages_double_bit,
                    "pending": gpu.retired_pages_pending, "limit": _RETIRED_PAGE_LIMIT}
        source = "NVIDIA dynamic page retirement documentation"
        if gpu.retired_pages_pending:
            out.append(Finding("gpu.retired-pages", "fail", gpu_subject(gpu), "A page retirement is pending",
                               evidence, f"Drain and reset the GPU (`nvidia-smi -r -i {gpu.index}`) or reboot",
                               source))
        elif total >= _RETIRED_PAGE_NEAR:
            out.append(Finding("gpu.retired-pages", "fail", gpu_subject(gpu),
                               f"{total} retired pages, near the limit of {_RETIRED_PAGE_LIMIT}", evidence,
                               "Plan an RMA", source))
        else:
            out.append(Finding("gpu.retired-pages", "pass", gpu_subject(gpu), f"{total} retired pages", evidence))
    return out


@rule
def pcie(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        model = kb.gpu_model(gpu.name) or {}
        if gpu.pcie_gen_max is None or gpu.pcie_width_max is None or not model.get("pcie_gen"):
            continue   # no reference (e.g. GH200's C2C link): nothing to compare with
        # max, not current: idle links down-train, so only the negotiated maximum is a fault
        capable_gen = min(int(model["pcie_gen"]), gpu.pcie_gen_host_max or 99)
        evidence = {"max_link_gen": gpu.pcie_gen_max, "max_link_width": gpu.pcie_width_max,
                    "gpu_gen": int(model["pcie_gen"]), "host_max_gen": gpu.pcie_gen_host_max,
                    "current_gen": gpu.pcie_gen_current, "current_width": gpu.pcie_width_current}
        if gpu.pcie_gen_max < capable_gen or gpu.pcie_width_max < 16:
            out.append(Finding("gpu.pcie-degraded", "warn", gpu_subject(gpu),
                               f"PCIe link maximum Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max} below "
                               f"Gen{capable_gen} x16", evidence,
                               "Reseat the GPU or riser, check BIOS slot settings (link speed/bifurcation)",
                               f"gpus.csv ({model.get('source')})"))
        else:
            out.append(Finding("gpu.pcie-degraded", "pass", gpu_subject(gpu),
                               f"PCIe Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}", evidence))
    return out


@rule
def temperature(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.temperature_c is None:
            continue
        limit = gpu.temperature_slowdown_c or gpu.temperature_max_operating_c
        evidence = {"temperature_c": gpu.temperature_c, "slowdown_c": gpu.temperature_slowdown_c,
                    "max_operating_c": gpu.temperature_max_operating_c}
        if limit and gpu.temperature_c >= limit:
            out.append(Finding("gpu.temperature", "fail", gpu_subject(gpu),
                               f"{gpu.temperature_c} C at or above the slowdown threshold {limit} C", evidence,
                               "Check airflow, fans and inlet temperature"))
        elif limit and gpu.temperature_c >= limit - 5:
            out.append(Finding("gpu.temperature", "warn", gpu_subject(gpu),
                               f"{gpu.temperature_c} C within 5 C of slowdown ({limit} C)", evidence,
                               "Check airflow, fans and inlet temperature"))
        else:
            out.append(Finding("gpu.temperature", "pass", gpu_subject(gpu), f"{gpu.temperature_c} C", evidence))
    return out


@rule
def mixed_models(snap, ctx):
    names = Counter(g.name for g in all_gpus(snap) if g.name)
    if len(names) > 1:
        return [Finding("gpu.mixed-models", "warn", host(snap), "GPUs of different models in one node",
                        {"models": dict(names)},
                        "Set CUDA_VISIBLE_DEVICES per job so a training job uses one model; DDP runs at the slowest GPU's pace")]
    return []


@rule
def mig(snap, ctx):
    return [Finding("gpu.mig-enabled", "info", gpu_subject(g), "MIG mode is enabled",
                    {"mig_current": True, "mig_pending": g.mig_mode_pending, "mig_devices": g.mig_devices},
                    f"For full-GPU training: nvidia-smi -i {g.index} -mig 0 (then reset the GPU)")
            for g in all_gpus(snap) if g.mig_mode_current]


@rule
def compute_mode(snap, ctx):
    return [Finding("gpu.compute-mode", "warn", gpu_subject(g), f"Compute mode is {g.compute_mode}",
                    {"compute_mode": g.compute_mode},
                    f"nvidia-smi -i {g.index} -c DEFAULT (Prohibited blocks CUDA; Exclusive allows one process)")
            for g in all_gpus(snap) if g.compute_mode and g.compute_mode != "Default"]


@rule
def capture_incomplete(snap, ctx):
    """A report whose header names more GPUs than it holds was cut short (or GPUs vanished while it ran)."""
    said, have = snap.nvml.attached_gpus, len(snap.gpus or [])
    if said is None or have >= said:
        return []
    return [Finding("gpu.capture-incomplete", "warn", host(snap),
                    f"nvidia-smi's report names {said} GPUs but holds {have}: {said - have} missing from what was judged",
                    {"attached_gpus": said, "gpus_in_report": have, "missing": said - have},
                    "Capture the whole `nvidia-smi -q` again; if it stops at the same GPU, that GPU hangs the query "
                    "(check the kernel log for Xids and `nvidia-smi -L`)")]


@rule
def gpu_count(snap, ctx):
    wanted = ctx.profile.get("min_gpus")
    if not wanted or snap.gpus is None:
        return []
    have = len(snap.gpus)
    if have < wanted:
        return [Finding("gpu.count", "fail", host(snap), f"{have} GPU(s), profile wants at least {wanted}",
                        {"gpus": have, "min_gpus": wanted}, "Check `lspci | grep -i nvidia` and the kernel log for GPUs that did not come up")]
    return [Finding("gpu.count", "pass", host(snap), f"{have} GPU(s)", {"gpus": have})]
