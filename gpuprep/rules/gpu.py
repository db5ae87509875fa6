"""gpu.*: the state of each GPU — errors in the kernel log, memory health, clocks, power, links."""
from __future__ import annotations

import re
from typing import List
from collections import Counter, OrderedDict

from .. import knowledge as kb
from ..parsers.nvsmi import POLICY_REASONS, THROTTLE_REASONS
from ..snapshot import gpu_count as counted_gpus, normalize_bus_id
from . import Finding, action_of, all_gpus, gpu_ref, gpu_subject, host, rule, shell_word

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
# the most specific reason decides what to look at
_THROTTLE_ACTIONS = (
    ("hw_power_brake_slowdown", "An external power-brake signal holds the clocks down: check the platform's power "
                                "supplies and the BMC's power policy (not the GPU); drain until it clears"),
    ("hw_thermal_slowdown", "The GPU is at its hardware thermal limit: check airflow, fans and inlet temperature"),
    ("sw_thermal_slowdown", "The driver slows the GPU for heat: check airflow, fans and inlet temperature"),
    ("hw_slowdown", "Hardware slowdown (thermal or power brake) is active: check cooling and the power supplies; "
                    "drain if it persists"),
)
_RETIRED_PAGE_LIMIT = 64   # NVIDIA: a board may retire up to 64 pages; RMA well before that
_RETIRED_PAGE_NEAR = 60


# The driver states the recovery it wants in Xid 154's own line ("... changed from 0x0 (None) to 0x1 (GPU
# Reset Required)"); NVIDIA's catalog lists the actions. That line, not the code, decides the verdict.
_RECOVERY_ACTION = re.compile(r"recovery action changed from .*? to (0x[0-9a-fA-F]+)\s*\(([^)]*)\)", re.I)
_RECOVERY = {
    "none": ("info", "the driver needs no recovery any more"),
    "gpu reset required": ("fail", "drain the GPU and reset it (`nvidia-smi -r -i {index}`), as the driver asks"),
    "node reboot required": ("fail", "drain the node and reboot it, as the driver asks"),
    "drain p2p": ("fail", "drain peer-to-peer traffic (stop the jobs using this GPU's NVLink/P2P), then reset the GPU"),
    "drain and reset": ("fail", "drain the GPU's work, then reset it (`nvidia-smi -r -i {index}`), as the driver asks"),
}
# NVLink5 (GB200/B200) Xids 144-150 say in their line whether the error was fatal (NVIDIA's decode table)
_NVLINK5 = range(144, 151)
_NVLINK5_NONFATAL = ("warn", "non-fatal NVLink error, corrected by the link: watch for repeats on the same link")
_NVLINK5_FATAL = ("fail", "drain and reset the GPU (`nvidia-smi -r -i {index}`) or reboot; if it repeats, check "
                          "the NVLink cabling/trays and the peer GPU or switch")


def _xid_verdict(code: int, message: str, row: dict):
    """(severity, action) for one Xid line: the catalog's resolution, refined by what the line says."""
    if code == 154:
        match = _RECOVERY_ACTION.search(message or "")
        if match:
            # the driver's own words name the action: an unknown one is drained and quoted, never acted on
            return _RECOVERY.get(match.group(2).strip().lower(),
                                 ("fail", "drain the GPU and follow the driver's recovery action "
                                          f"'{match.group(2).strip()[:60]}'"))
    if code == 45:
        cause = re.search(r"caused by previous Xid (\d+)", message or "")
        if cause and int(cause.group(1)) != 45:
            # a channel torn down because of an earlier Xid: that Xid decides (its line may not be in the paste)
            severity, action = _xid_verdict(int(cause.group(1)), "", kb.xid_catalog().get(int(cause.group(1)), {}))
            return severity, f"caused by Xid {cause.group(1)}: {action}"
    if code == 63 and "reset gpu to activate" in (message or "").lower():
        return ("warn", "a row remap waits for a GPU reset: if `nvidia-smi -q -d ROW_REMAPPER` still says Pending: "
                        "Yes, drain and reset the GPU (`nvidia-smi -r -i {index}`)")
    if code in _NVLINK5:
        words = (message or "").lower()
        if "nonfatal" in words or "non-fatal" in words:
            return _NVLINK5_NONFATAL
        if "fatal" in words:
            return _NVLINK5_FATAL
    resolution = row.get("nvidia_resolution", "")
    return _RESOLUTION.get(resolution, (_CLASS.get(row.get("severity_class", ""), "warn"),
                                        f"follow NVIDIA's {resolution or 'catalog'} guidance"))


@rule("gpu.xid", "gpu.sxid")
def xid(snap, ctx):
    groups = OrderedDict()
    for event in snap.xids or []:
        if event.kind not in ("xid", "sxid"):
            continue
        pci = normalize_bus_id(event.pci) if event.pci else None
        if event.kind == "sxid":
            row = kb.sxid_catalog().get(event.code, {})
            verdict = (_CLASS.get(row.get("severity_class", ""), "warn"),
                       row.get("nvidia_recovery") or "see NVIDIA Fabric Manager guide, appendix D")
            if (event.message or "").lower().startswith("non-fatal"):      # the fabric manager's own word
                verdict = ("warn", "non-fatal NVSwitch error: watch for repeats on the same port; " + verdict[1])
        else:
            verdict = _xid_verdict(event.code, event.message, kb.xid_catalog().get(event.code, {}))
        groups.setdefault((event.kind, event.code, pci, verdict), []).append(event)
    findings = []
    for (kind, code, pci, (severity, action)), seen in groups.items():
        gpu = snap.gpu_by_bus(pci) if pci else None
        subject = gpu_subject(gpu) if gpu else (f"PCI {pci}" if pci else host(snap))
        if kind == "sxid":
            row = kb.sxid_catalog().get(code, {})
            title = f"NVSwitch SXid {code} ({row.get('name', 'unknown')}) seen {len(seen)}x"
            source = row.get("source")
        else:
            row = kb.xid_catalog().get(code, {})
            title = f"Xid {code} ({row.get('description', 'not in the catalog')}) seen {len(seen)}x"
            source = _XID_SOURCE
        evidence = {"code": code, "count": len(seen), "pci": pci, "last": seen[-1].time,
                    "message": seen[-1].message}
        # the action is read from the template (this module's tables), before any node word is put in it
        repair = "drain" if "recovery action '" in action else action_of(action)
        findings.append(Finding(f"gpu.{kind}", severity, subject, title, evidence,
                                action.format(index=gpu_ref(gpu) if gpu else (shell_word(pci) if pci else "<gpu>")),
                                source, repair))
    return findings


# Kernel-log messages about a GPU that are not Xids (kernel_log.KERNEL_EVENTS reads them)
_KERNEL_EVENTS = {
    "init-failed": ("gpu.init-failed", "fail", "The driver could not initialise the GPU (RmInitAdapter failed)",
                    "Drain and reboot; if it persists, check the BIOS (Above 4G decoding, Resizable BAR), then "
                    "reseat the GPU or RMA it"),
    "reset-required": ("gpu.reset-required", "fail", "The driver reports that the GPU requires a reset "
                                                     "(NV_ERR_RESET_REQUIRED)",
                       "Drain and reset the GPU (`nvidia-smi -r`), or reboot if the reset fails"),
    "not-probed": ("driver.not-probed", "fail", "The NVIDIA driver did not take the GPUs (no adapter probed)",
                   "Another driver (nouveau, a framebuffer driver) owns them: blacklist it "
                   "(`gpuprep apply --tags system_tuning_nouveau`), rebuild the initramfs and reboot"),
    "pcie-aer": ("sys.pcie-aer", "warn", "PCIe errors reported by AER",
                 "Corrected errors in bursts point at the slot, riser or cable of the devices below that port: "
                 "reseat or inspect them at the next drain; uncorrected ones fail the link"),
}


@rule(*(row[0] for row in _KERNEL_EVENTS.values()))
def kernel_events(snap, ctx):
    groups = OrderedDict()
    for event in snap.xids or []:
        if event.kind in _KERNEL_EVENTS:
            key = (event.kind, normalize_bus_id(event.pci) if event.pci else None, event.code)
            groups.setdefault(key, []).append(event)
    out = []
    for (kind, pci, code), seen in groups.items():
        finding_id, severity, title, remedy = _KERNEL_EVENTS[kind]
        if kind == "pcie-aer" and code:      # code 1: an uncorrected (non-fatal or fatal) error
            severity, title = "fail", "Uncorrected PCIe errors reported by AER"
        gpu = snap.gpu_by_bus(pci) if pci else None
        subject = gpu_subject(gpu) if gpu else (f"PCI {pci}" if pci else host(snap))
        out.append(Finding(finding_id, severity, subject, f"{title}, {len(seen)}x",
                           {"count": len(seen), "pci": pci, "last": seen[-1].time, "message": seen[-1].message},
                           remedy, "NVIDIA driver (NVRM) kernel messages; Linux PCIe AER"))
    return out


# What to do about a GPU that does not answer, by what nvidia-smi or NVML said (first match wins)
_NO_ANSWER_ACTIONS = (
    ("is lost", "The GPU is lost (Xid 79 class): drain and reboot, as the driver asks; if it recurs, check power, "
                "cabling and seating, then RMA", "reboot"),
    ("requires reset", "Drain and reset the GPU (`nvidia-smi -r -i {ref}`), or reboot if the reset fails", "reset-gpu"),
    ("requires restart", "Drain and reset the GPU (`nvidia-smi -r -i {ref}`), or reboot if the reset fails",
     "reset-gpu"),
    ("", "Drain the node and look in the kernel log for the Xid (79, 119, 154 are usual); reset the GPU "
         "(`nvidia-smi -r -i {ref}`) or reboot; if it recurs, reseat or RMA", "drain"),
)
_IDENTITY_FIELDS = ("name", "Product Name", "Product Brand", "Product Architecture", "GPU UUID", "Serial Number",
                    "VBIOS Version", "Minor Number")
_UNANSWERED_FIELDS = 3     # this many fields read as errors: the GPU, not one sensor, is failing


def _no_answer_action(text: str, gpu):
    """(remedy, action) for what nvidia-smi or NVML said of a GPU that does not answer."""
    low = text.lower()
    remedy, action = next((remedy, action) for key, remedy, action in _NO_ANSWER_ACTIONS if key in low)
    return remedy.format(ref=gpu_ref(gpu)), action


@rule("gpu.sensor-unreadable", "gpu.unreachable")
def unanswered(snap, ctx):
    """A GPU that could not be queried at all, or reported errors instead of values. Its identity (name,
    brand, UUID) or several fields unreadable means the GPU stopped answering; one sensor alone is a warning
    (a transient ERR! on a power reading is known to clear by itself)."""
    out = []
    source = "nvidia-smi/NVML error values; NVIDIA GPU debug guidelines"
    for gpu in all_gpus(snap):
        errors = gpu.unreadable or []
        identity = [e for e in errors if e.split(" = ")[0].split(" / ")[0] in _IDENTITY_FIELDS]
        if gpu.failure or identity or len(errors) >= _UNANSWERED_FIELDS:
            what = gpu.failure or "; ".join(errors[:4]) + (f" and {len(errors) - 4} more" if len(errors) > 4 else "")
            remedy, repair = _no_answer_action(" ".join([gpu.failure or ""] + errors), gpu)
            out.append(Finding("gpu.unreachable", "fail", gpu_subject(gpu), f"The GPU does not answer: {what}",
                               {"failure": gpu.failure, "unreadable": errors or None}, remedy, source, repair))
        elif errors:
            out.append(Finding("gpu.sensor-unreadable", "warn", gpu_subject(gpu),
                               "The GPU could not report " + ", ".join(e.split(" = ")[0] for e in errors),
                               {"unreadable": errors},
                               "Watch it: if it persists or spreads to other fields, drain and reset the GPU "
                               f"(`nvidia-smi -r -i {gpu_ref(gpu)}`)", source))
    return out


@rule("gpu.not-permitted")
def not_permitted(snap, ctx):
    """GPUs NVML counts but this process may not open: under Slurm's cgroups (ConstrainDevices) a job sees the
    node's other GPUs this way. Not judged, never failed for it; a host where no GPU could be opened was not
    checked at all, which is never healthy."""
    hidden = [gpu for gpu in all_gpus(snap) if gpu.not_permitted]
    if not hidden:
        return []
    opened = [gpu for gpu in all_gpus(snap) if not gpu.not_permitted]
    names = ", ".join(gpu_subject(gpu) for gpu in hidden)
    if opened:
        return [Finding("gpu.not-permitted", "info", host(snap),
                        f"{len(hidden)} GPU(s) this process may not open were not judged: {names}",
                        {"not_permitted": [gpu.index for gpu in hidden], "judged": [gpu.index for gpu in opened]},
                        "Nothing to do inside a job that was given only some GPUs; run `gpuprep check` as root "
                        "outside any job to judge them all", "nvml.h: nvmlDeviceGetHandleByIndex, NO_PERMISSION")]
    return [Finding("gpu.not-permitted", "warn", host(snap),
                    f"No GPU could be opened by this process ({names}): none was judged",
                    {"not_permitted": [gpu.index for gpu in hidden]},
                    "Run `gpuprep check` as root, or give this user access to /dev/nvidia* (the video group)",
                    "nvml.h: nvmlDeviceGetHandleByIndex, NO_PERMISSION")]


@rule("gpu.persistence-off")
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


@rule("gpu.app-clocks-below-max")
def app_clocks(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if None in (gpu.app_clock_graphics_mhz, gpu.max_clock_graphics_mhz):
            continue   # GPU without application clocks (GeForce, many workstation boards)
        evidence = {"app_graphics_mhz": gpu.app_clock_graphics_mhz, "max_graphics_mhz": gpu.max_clock_graphics_mhz,
                    "app_mem_mhz": gpu.app_clock_mem_mhz, "max_mem_mhz": gpu.max_clock_mem_mhz}
        default = gpu.default_app_clock_graphics_mhz
        evidence["default_app_graphics_mhz"] = default
        if gpu.app_clock_graphics_mhz < gpu.max_clock_graphics_mhz:
            # the factory default sits below max on most boards and GPU Boost clocks past it under load: only a
            # setting lowered below the default is a sign that someone held this GPU back
            lowered = default is not None and gpu.app_clock_graphics_mhz < default
            title = (f"Application clocks {gpu.app_clock_graphics_mhz} MHz, lowered below the factory default "
                     f"{default} MHz (max {gpu.max_clock_graphics_mhz} MHz)" if lowered else
                     f"Application clocks {gpu.app_clock_graphics_mhz} MHz below max {gpu.max_clock_graphics_mhz} "
                     "MHz, " + ("at the factory default" if default is not None else "the factory default not known"))
            out.append(Finding("gpu.app-clocks-below-max", "warn" if lowered else "info", gpu_subject(gpu), title,
                               evidence,
                               "gpuprep apply --tags gpu_clocks (locks clocks; application clocks are deprecated in NVML)"
                               if lowered else None,
                               "nvidia-smi -q CLOCK section; NVML deprecation of application clocks"))
        else:
            out.append(Finding("gpu.app-clocks-below-max", "pass", gpu_subject(gpu),
                               "Application clocks at max", evidence))
    return out


@rule("gpu.clock-throttle")
def throttle(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        reasons = gpu.clock_event_reasons
        if reasons is None:
            continue
        hard = [r for r in reasons if r in THROTTLE_REASONS]
        if hard:
            out.append(Finding("gpu.clock-throttle", "fail", gpu_subject(gpu),
                               "GPU clocks held down by " + ", ".join(hard),
                               {"active_reasons": reasons, "temperature_c": gpu.temperature_c,
                                "power_draw_w": gpu.power_draw_w},
                               next(action for reason, action in _THROTTLE_ACTIONS if reason in hard),
                               "NVML clocks event reasons (nvmlClocksEventReasons)"))
        elif "sw_power_cap" in reasons:
            idle = "gpu_idle" in reasons or (gpu.power_draw_w is not None and gpu.power_limit_w and
                                             gpu.power_draw_w < 0.5 * gpu.power_limit_w)
            out.append(Finding("gpu.clock-throttle", "info" if idle else "warn", gpu_subject(gpu),
                               "Software power cap active" + (" while idle" if idle else ""),
                               {"active_reasons": reasons, "power_draw_w": gpu.power_draw_w,
                                "power_limit_w": gpu.power_limit_w},
                               None if idle else "Raise the power limit (`gpuprep apply --tags gpu_clocks -e gpu_clocks_power_limit=...`)"))
        elif set(reasons) & set(POLICY_REASONS):
            out.append(Finding("gpu.clock-throttle", "info", gpu_subject(gpu), "Clocks limited by NVIDIA's " +
                               " and ".join(r.replace("_", " ") for r in reasons if r in POLICY_REASONS) + " policy",
                               {"active_reasons": reasons}, "A policy of the GPU, not a fault: nothing to change on "
                               "the node; ask the system vendor if it holds the clocks down under load",
                               "NVML clocks event reasons (BoardLimit, Reliability)"))
        else:
            out.append(Finding("gpu.clock-throttle", "pass", gpu_subject(gpu), "No clock throttling",
                               {"active_reasons": reasons}))
    return out


@rule("gpu.ecc-disabled", "gpu.ecc-uncorrectable")
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
                               f"nvidia-smi -i {gpu_ref(gpu)} -e 1 && reboot (or reset the GPU)",
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


@rule("gpu.row-remap")
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
                               evidence, f"Drain and reset the GPU (`nvidia-smi -r -i {gpu_ref(gpu)}`) to apply it",
                               source))
        elif (gpu.remapped_rows_uncorrectable or 0) > 512:
            out.append(Finding("gpu.row-remap", "fail", gpu_subject(gpu),
                               f"{gpu.remapped_rows_uncorrectable} rows remapped for uncorrectable errors",
                               evidence, "Plan an RMA", "Azure HPC health checks threshold (512)"))
        else:
            out.append(Finding("gpu.row-remap", "pass", gpu_subject(gpu), "No pending or failed row remaps",
                               evidence))
    return out


@rule("gpu.retired-pages")
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
                               evidence, f"Drain and reset the GPU (`nvidia-smi -r -i {gpu_ref(gpu)}`) or reboot",
                               source))
        elif total >= _RETIRED_PAGE_NEAR:
            out.append(Finding("gpu.retired-pages", "fail", gpu_subject(gpu),
                               f"{total} retired pages, near the limit of {_RETIRED_PAGE_LIMIT}", evidence,
                               "Plan an RMA", source))
        else:
            out.append(Finding("gpu.retired-pages", "pass", gpu_subject(gpu), f"{total} retired pages", evidence))
    return out


@rule("gpu.pcie-width")
def pcie_width(snap, ctx):
    """A current link width below the maximum on a GPU at work is a slot, riser or link-training problem. An
    idle GPU may run a narrower link (nvidia-smi --help-query-gpu: the current width 'may be reduced when the
    GPU is not in use'), so idle it is only noted; four healthy captures of the corpus show x8 of x16 at P8."""
    out = []
    for gpu in all_gpus(snap):
        now, most = gpu.pcie_width_current, gpu.pcie_width_max
        if now is None or most is None:
            continue
        if now < most and "gpu_idle" in (gpu.clock_event_reasons or []):
            out.append(Finding("gpu.pcie-width", "info", gpu_subject(gpu), f"PCIe link at x{now} of x{most} while idle",
                               {"current_width": now, "max_width": most, "idle": True},
                               "Look again under load (`gpuprep burnin`, or nvidia-smi while a job runs): a narrow "
                               "link at work is a slot or riser problem", "nvidia-smi --help-query-gpu"))
        elif now < most:
            out.append(Finding("gpu.pcie-width", "warn", gpu_subject(gpu), f"PCIe link runs at x{now} of x{most}",
                               {"current_width": now, "max_width": most, "current_gen": gpu.pcie_gen_current},
                               f"Reseat the GPU or its riser/cable at the next drain and check the slot's "
                               f"bifurcation setting in the BIOS (x{now} cuts host-device bandwidth to {now}/{most}). "
                               "In a cloud VM it can be the instance's wiring (AWS g4dn/g5 GPUs report x8 of x16): "
                               "compare with a sister instance before acting",
                               "nvidia-smi -q PCI / GPU Link Info"))
        else:
            out.append(Finding("gpu.pcie-width", "pass", gpu_subject(gpu), f"PCIe link at its full width x{most}"))
    return out


def _fabric_not_registered(gpu) -> bool:
    state, status = (gpu.fabric_state or "").lower(), (gpu.fabric_status or "").lower()
    return bool(status and status != "success") or state in ("in progress", "not started")


def _fabric_config_errors(gpu) -> List[str]:
    return [f for f in gpu.fabric_health_flags or [] if f.startswith("incorrect configuration")]


_FM_GUIDE = "NVIDIA Fabric Manager user guide"
# (does it hold, severity, title, remedy, source): the first that holds decides, worst first
_FABRIC_VERDICTS = (
    (lambda g: "route unhealthy" in (g.fabric_health_flags or []), "fail",
     lambda g: "An NVLink fabric route of this GPU is unhealthy",
     "Drain; read the fabric manager's log and the kernel's SXid lines, then reset the GPU or reboot; if the route "
     "stays unhealthy, the NVLink or NVSwitch tray needs service", "NVML fabric health mask (ROUTE_UNHEALTHY); " + _FM_GUIDE),
    (_fabric_config_errors, "fail",
     lambda g: "The NVLink fabric rejects this GPU's configuration: " + ", ".join(
         f.split(": ", 1)[1] for f in _fabric_config_errors(g)),
     "Drain; insufficient NVLinks or a wrong location/GUID means a cable, tray or compute-tray position problem "
     "(check `nvidia-smi nvlink -s` and the rack's inventory); no partition means the global fabric manager has not "
     "assigned one (NMX / `nvidia-smi -q` Partition Assigned); incompatible firmware means updating the GPU firmware "
     "bundle", "NVML fabric health mask (INCORRECT_CONFIGURATION); " + _FM_GUIDE),
    (lambda g: (g.fabric_health or "").lower() == "unhealthy", "fail",
     lambda g: "The GPU's NVLink fabric health is Unhealthy",
     "Drain; read the Fabric Health fields of `nvidia-smi -q` (route recovery, unhealthy routes, access timeouts, "
     "configuration) and the fabric manager's log, then reset the GPU or reboot", "nvidia-smi -q Fabric Health; " + _FM_GUIDE),
    (lambda g: (g.fabric_bandwidth or "").lower() == "degraded", "fail",
     lambda g: "NVLink fabric bandwidth is degraded (an NVLink to the NVSwitches is down)",
     "Drain; look for NVLink/SXid errors in the kernel and fabric manager logs, reset the GPU or reboot; if it stays "
     "degraded, reseat or RMA the baseboard", "NVML fabric health mask (DEGRADED_BW); " + _FM_GUIDE),
    (_fabric_not_registered, "fail",
     lambda g: f"Not registered with the NVLink fabric: state {g.fabric_state or '?'}, status {g.fabric_status or '?'}",
     "Drain; check that nvidia-fabricmanager (NVLSM on Blackwell) runs and matches the driver version "
     "(`systemctl status nvidia-fabricmanager`, its log), then restart it or reboot", _FM_GUIDE),
    (lambda g: (g.fabric_health or "").lower() == "limited capacity", "warn",
     lambda g: "The GPU's NVLink fabric runs at limited capacity",
     "Jobs run, with less NVLink bandwidth; read the Fabric Health fields of `nvidia-smi -q` and the fabric "
     "manager's log, and plan a reset or service at the next drain", "nvidia-smi -q Fabric Health Summary; " + _FM_GUIDE),
    (lambda g: g.fabric_health_flags, "warn",
     lambda g: f"The NVLink fabric is recovering or unmanaged: {', '.join(g.fabric_health_flags)}",
     "Check again in a few minutes; if it does not clear, read the fabric manager's log (and the global fabric "
     "manager's, NMX, on a rack) and drain the node", "NVML fabric health mask (ROUTE_RECOVERY, "
     "ACCESS_TIMEOUT_RECOVERY, GFM_STATE)"),
)


@rule("gpu.fabric")
def fabric(snap, ctx):
    """On NVSwitch systems each GPU registers with the NVLink fabric (fabric manager); until it has, CUDA
    fails with 'system not yet initialized' (error 802) and NCCL cannot use NVLink. Once registered, the driver
    reports the fabric's health: its summary and the mask's conditions."""
    out = []
    for gpu in all_gpus(snap):
        if gpu.fabric_state is None and gpu.fabric_status is None:
            continue
        evidence = {"state": gpu.fabric_state, "status": gpu.fabric_status, "bandwidth": gpu.fabric_bandwidth,
                    "health": gpu.fabric_health, "health_flags": gpu.fabric_health_flags}
        verdict = next((v for v in _FABRIC_VERDICTS if v[0](gpu)), None)
        if verdict is None:
            out.append(Finding("gpu.fabric", "pass", gpu_subject(gpu), "Registered with the NVLink fabric", evidence))
            continue
        _, severity, title, remedy, source = verdict
        out.append(Finding("gpu.fabric", severity, gpu_subject(gpu), title(gpu), evidence, remedy, source))
    return out


@rule("gpu.pcie-degraded")
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


def _thermal_headroom(gpu):
    """(degrees C before the GPU throttles, the limit in words), or (None, None) when nothing says. Older GPUs give
    absolute thresholds; R550+ drivers give the margin to T.Limit, the maximum operating temperature, instead."""
    limit = gpu.temperature_slowdown_c or gpu.temperature_max_operating_c
    if limit and gpu.temperature_c is not None:
        return limit - gpu.temperature_c, f"the slowdown threshold {limit} C"
    if gpu.tlimit_margin_c is not None:
        at = gpu.tlimit_max_operating_c if gpu.tlimit_max_operating_c is not None else 0
        return gpu.tlimit_margin_c - at, f"T.Limit ({gpu.tlimit_margin_c} C of margin, throttling at {at} C)"
    return None, None


@rule("gpu.temperature")
def temperature(snap, ctx):
    out = []
    for gpu in all_gpus(snap):
        if gpu.temperature_c is None and gpu.tlimit_margin_c is None:
            continue
        headroom, limit = _thermal_headroom(gpu)
        evidence = {"temperature_c": gpu.temperature_c, "slowdown_c": gpu.temperature_slowdown_c,
                    "max_operating_c": gpu.temperature_max_operating_c, "tlimit_margin_c": gpu.tlimit_margin_c,
                    "tlimit_slowdown_c": gpu.tlimit_slowdown_c, "tlimit_max_operating_c": gpu.tlimit_max_operating_c}
        now = f"{gpu.temperature_c} C" if gpu.temperature_c is not None else "The GPU"
        if headroom is not None and headroom <= 0:
            out.append(Finding("gpu.temperature", "fail", gpu_subject(gpu), f"{now} at or past {limit}", evidence,
                               "Check airflow, fans and inlet temperature"))
        elif headroom is not None and headroom <= 5:
            out.append(Finding("gpu.temperature", "warn", gpu_subject(gpu), f"{now} within 5 C of {limit}", evidence,
                               "Check airflow, fans and inlet temperature"))
        else:
            margin = f", {headroom} C below {limit}" if headroom is not None else ""
            out.append(Finding("gpu.temperature", "pass", gpu_subject(gpu), f"{now}{margin}", evidence))
    return out


@rule("gpu.mixed-models")
def mixed_models(snap, ctx):
    names = Counter(g.name for g in all_gpus(snap) if g.name)
    if len(names) > 1:
        return [Finding("gpu.mixed-models", "warn", host(snap), "GPUs of different models in one node",
                        {"models": dict(names)},
                        "Set CUDA_VISIBLE_DEVICES per job so a training job uses one model; DDP runs at the slowest GPU's pace")]
    return []


@rule("gpu.mig-enabled")
def mig(snap, ctx):
    return [Finding("gpu.mig-enabled", "info", gpu_subject(g), "MIG mode is enabled",
                    {"mig_current": True, "mig_pending": g.mig_mode_pending, "mig_devices": g.mig_devices},
                    f"For full-GPU training: nvidia-smi -i {gpu_ref(g)} -mig 0 (then reset the GPU)")
            for g in all_gpus(snap) if g.mig_mode_current]


@rule("gpu.compute-mode")
def compute_mode(snap, ctx):
    return [Finding("gpu.compute-mode", "warn", gpu_subject(g), f"Compute mode is {g.compute_mode}",
                    {"compute_mode": g.compute_mode},
                    f"nvidia-smi -i {gpu_ref(g)} -c DEFAULT (Prohibited blocks CUDA; Exclusive allows one process)")
            for g in all_gpus(snap) if g.compute_mode and g.compute_mode != "Default"]


@rule("gpu.capture-incomplete")
def capture_incomplete(snap, ctx):
    """A report whose header names more GPUs than it holds was cut short (or GPUs vanished while it ran)."""
    cuts = [Finding("gpu.capture-incomplete", "warn", host(snap), f"Capture cut short: {cut}; what it shows is "
                    "judged, the rest is not known", {"cut": cut},
                    "Capture it whole again; if it always stops at the same GPU, that GPU hangs the query (check the "
                    "kernel log for Xids and `nvidia-smi -L`)") for cut in snap.incomplete or []]
    said, have = snap.nvml.attached_gpus, len(snap.gpus or [])
    if said is None or have >= said:
        return cuts
    return cuts + [Finding("gpu.capture-incomplete", "warn", host(snap),
                    f"nvidia-smi's report names {said} GPUs but holds {have}: {said - have} missing from what was judged",
                    {"attached_gpus": said, "gpus_in_report": have, "missing": said - have},
                    "Capture the whole `nvidia-smi -q` again; if it stops at the same GPU, that GPU hangs the query "
                    "(check the kernel log for Xids and `nvidia-smi -L`)")]


@rule("gpu.count")
def gpu_count(snap, ctx):
    wanted = ctx.profile.get("min_gpus")
    if not wanted:
        return []
    counted = counted_gpus(snap)
    if counted is None and snap.nvml.available is not False:
        return [Finding("gpu.count", "warn", host(snap), f"GPU count not known; the profile wants at least {wanted}",
                        {"min_gpus": wanted}, "Give a capture that lists the GPUs (nvidia-smi -q), or run on the host")]
    have = counted or 0     # no driver answering: no GPU this profile can use
    if have < wanted:
        return [Finding("gpu.count", "fail", host(snap), f"{have} GPU(s), profile wants at least {wanted}",
                        {"gpus": have, "min_gpus": wanted}, "Check `lspci | grep -i nvidia` and the kernel log for GPUs that did not come up")]
    return [Finding("gpu.count", "pass", host(snap), f"{have} GPU(s)", {"gpus": have})]
