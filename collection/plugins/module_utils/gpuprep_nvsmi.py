# Built by tools/build_collection.py from gpuprep/parsers/nvsmi.py, gpuprep's one copy: edit that file, not this one.
"""nvidia-smi's `-q` text (also `-a` and `-q -d SECTION`) and `-q -x` XML reports, parsed into plain
dicts: one field table names, for every GPU field, where the text report and the XML report keep it.

Standard library only: gpuprep's reader (parsers/nvsmi_query.py) and the roles' facts
module (gpuprep.node.gpuprep_gpu_facts) share this one parser."""
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# --- values: what nvidia-smi printed, typed; anything it could not report is None ----------

# What the GPU could not report because it failed to answer (nvidia-smi prints NVML's error for the field):
# unknown to the parser, and evidence of a GPU in trouble. "N/A", "[N/A]" and "Not Supported" are not among
# them: healthy GPUs print those for fields they lack (`--query-gpu` prints "[N/A]" for an absent fan).
ERROR_VALUES = {"unknown error", "[unknown error]", "gpu is lost", "[gpu is lost]", "gpu requires reset",
                "[gpu requires reset]", "err!"}
_UNKNOWN = {"", "n/a", "[n/a]", "unknown", "not supported", "[not supported]",
            "requested functionality has been deprecated", "insufficient permissions",
            "[insufficient permissions]"} | ERROR_VALUES
# Fields NVML fails to read on healthy machines too (the host side of the PCIe link, behind many
# hypervisors and bridges: "Host Max : Unknown Error" in a healthy capture of the corpus).
_BENIGN_ERRORS = ("Host Max", "max_host_link_gen")
# What people add to a pasted report: "Pending : Yes   <===", "... <-- here", "# note"
_ANNOTATION = re.compile(r"\s+(?:<[-=]{1,}|[-=]{2,}>|\(?<--|#|//|\u2190).*$")


def is_error(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() in ERROR_VALUES


_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
_NUMBER_DIGITS = 18      # no reading nvidia-smi prints has more digits: more is a damaged capture


def known(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in _UNKNOWN else text


def number(value: Optional[str]) -> Optional[float]:
    text = known(value)
    if text is None:
        return None
    match = _NUMBER.match(text)
    if match is None:
        return None
    if len(match.group(1).lstrip("-").split(".")[0]) > _NUMBER_DIGITS:
        raise ValueError("a number of %d digits (%s...) is no reading" % (len(match.group(1)), match.group(1)[:12]))
    return float(match.group(1))


def integer(value: Optional[str]) -> Optional[int]:
    num = number(value)
    return None if num is None else int(num)


def flag(value: Optional[str]) -> Optional[bool]:
    """Enabled/Disabled, On/Off, Yes/No, Active/Not Active."""
    text = known(value)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "on", "yes", "active", "true", "1"):
        return True
    if low in ("disabled", "off", "no", "not active", "false", "0", "none"):
        return False
    return None


Tree = Dict[str, object]

# --- text: indentation tree ------------------------------------------------------------

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY_VALUE = re.compile(r"^(\s*)(\S.*?)\s+:(?:\s(.*)|\s*)$")


def _indent(line: str) -> int:
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip(" "))


def parse_text_tree(lines: Sequence[str]) -> Tree:
    """Nested dict of an indented 'Key : Value' report. A key with children maps to a dict
    (its own value, if any, under ''); a repeated key keeps its first occurrence."""
    root: dict = {"children": []}
    stack: List[Tuple[int, dict]] = [(-1, root)]
    for raw in lines:
        if not raw.strip():
            continue
        line = raw.rstrip()
        depth = _indent(line)
        while stack[-1][0] >= depth:
            stack.pop()
        match = _KEY_VALUE.match(line)
        if match:
            value = _ANNOTATION.sub("", (match.group(3) or "").strip())
            node = {"key": match.group(2).strip(), "value": value, "children": []}
        else:
            node = {"key": line.strip(), "value": None, "children": []}
        stack[-1][1]["children"].append(node)
        stack.append((depth, node))
    return _as_tree(root["children"])


def _as_tree(nodes: List[dict]) -> Tree:
    out: Tree = {}
    for node in nodes:
        if node["key"] in out:
            continue
        if node["children"]:
            sub = _as_tree(node["children"])
            if node["value"]:
                sub[""] = node["value"]
            out[node["key"]] = sub
        else:
            out[node["key"]] = node["value"] if node["value"] is not None else {}
    return out


def split_text_gpus(text: str) -> Tuple[Tree, List[Tuple[str, Tree]]]:
    """The report's top-level fields and one (bus id, tree) per 'GPU xxxx:xx:xx.x' block."""
    header_lines: List[str] = []
    blocks: List[Tuple[str, List[str]]] = []
    for line in text.splitlines():
        match = _GPU_HEADER.match(line.rstrip())
        if match:
            blocks.append((match.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        elif not line.startswith("="):
            header_lines.append(line)
    return (parse_text_tree(header_lines),
            [(bus, parse_text_tree(block)) for bus, block in blocks])


# --- XML: element tree -> dict ----------------------------------------------------------

def _xml_to_tree(element) -> Tree:
    out: Tree = {}
    for child in element:
        if len(child):
            out.setdefault(child.tag, _xml_to_tree(child))
        else:
            out.setdefault(child.tag, (child.text or "").strip())
    return out


# --- the field table ----------------------------------------------------------------------

Path = Tuple[str, ...]


def _get(tree: Tree, path: Path) -> Optional[str]:
    node: object = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, dict):
        node = node.get("")
    return node if isinstance(node, str) else None


def _width(value: Optional[str]) -> Optional[int]:
    text = known(value)
    return integer(text.rstrip("x")) if text else None


# field, converter, text paths, xml paths
FIELDS: List[Tuple[str, Callable, List[Path], List[Path]]] = [
    ("name", known, [("Product Name",)], [("product_name",)]),
    ("architecture", known, [("Product Architecture",)], [("product_architecture",)]),
    ("uuid", known, [("GPU UUID",)], [("uuid",)]),
    ("serial", known, [("Serial Number",)], [("serial",)]),
    ("vbios_version", known, [("VBIOS Version",)], [("vbios_version",)]),
    ("inforom_image", known, [("Inforom Version", "Image Version")], [("inforom_version", "img_version")]),
    ("gsp_firmware", known, [("GSP Firmware Version",)], [("gsp_firmware_version",)]),
    ("pci_bus_id", known, [("PCI", "Bus Id")], [("pci", "pci_bus_id")]),
    ("memory_total_mib", integer, [("FB Memory Usage", "Total")], [("fb_memory_usage", "total")]),
    ("persistence_mode", flag, [("Persistence Mode",)], [("persistence_mode",)]),
    ("compute_mode", known, [("Compute Mode",)], [("compute_mode",)]),
    ("mig_mode_current", flag, [("MIG Mode", "Current")], [("mig_mode", "current_mig")]),
    ("mig_mode_pending", flag, [("MIG Mode", "Pending")], [("mig_mode", "pending_mig")]),
    ("clock_graphics_mhz", integer, [("Clocks", "Graphics")], [("clocks", "graphics_clock")]),
    ("clock_sm_mhz", integer, [("Clocks", "SM")], [("clocks", "sm_clock")]),
    ("clock_mem_mhz", integer, [("Clocks", "Memory")], [("clocks", "mem_clock")]),
    ("app_clock_graphics_mhz", integer, [("Applications Clocks", "Graphics")],
     [("applications_clocks", "graphics_clock")]),
    ("app_clock_mem_mhz", integer, [("Applications Clocks", "Memory")],
     [("applications_clocks", "mem_clock")]),
    ("default_app_clock_graphics_mhz", integer, [("Default Applications Clocks", "Graphics")],
     [("default_applications_clocks", "graphics_clock")]),
    ("default_app_clock_mem_mhz", integer, [("Default Applications Clocks", "Memory")],
     [("default_applications_clocks", "mem_clock")]),
    ("max_clock_graphics_mhz", integer, [("Max Clocks", "Graphics")], [("max_clocks", "graphics_clock")]),
    ("max_clock_sm_mhz", integer, [("Max Clocks", "SM")], [("max_clocks", "sm_clock")]),
    ("max_clock_mem_mhz", integer, [("Max Clocks", "Memory")], [("max_clocks", "mem_clock")]),
    ("power_draw_w", number,
     [("GPU Power Readings", "Power Draw"), ("Power Readings", "Power Draw")],
     [("gpu_power_readings", "power_draw"), ("power_readings", "power_draw")]),
    ("power_limit_w", number,
     [("GPU Power Readings", "Current Power Limit"), ("Power Readings", "Power Limit")],
     [("gpu_power_readings", "current_power_limit"), ("power_readings", "power_limit")]),
    ("power_default_limit_w", number,
     [("GPU Power Readings", "Default Power Limit"), ("Power Readings", "Default Power Limit")],
     [("gpu_power_readings", "default_power_limit"), ("power_readings", "default_power_limit")]),
    ("power_enforced_limit_w", number,
     [("GPU Power Readings", "Current Power Limit"), ("Power Readings", "Enforced Power Limit")],
     [("gpu_power_readings", "current_power_limit"), ("power_readings", "enforced_power_limit")]),
    ("power_min_limit_w", number,
     [("GPU Power Readings", "Min Power Limit"), ("Power Readings", "Min Power Limit")],
     [("gpu_power_readings", "min_power_limit"), ("power_readings", "min_power_limit")]),
    ("power_max_limit_w", number,
     [("GPU Power Readings", "Max Power Limit"), ("Power Readings", "Max Power Limit")],
     [("gpu_power_readings", "max_power_limit"), ("power_readings", "max_power_limit")]),
    ("temperature_c", integer, [("Temperature", "GPU Current Temp")], [("temperature", "gpu_temp")]),
    ("temperature_slowdown_c", integer, [("Temperature", "GPU Slowdown Temp")],
     [("temperature", "gpu_temp_slow_threshold")]),
    ("temperature_shutdown_c", integer, [("Temperature", "GPU Shutdown Temp")],
     [("temperature", "gpu_temp_max_threshold")]),
    ("temperature_max_operating_c", integer, [("Temperature", "GPU Max Operating Temp")],
     [("temperature", "gpu_temp_max_gpu_threshold")]),
    ("tlimit_margin_c", integer, [("Temperature", "GPU T.Limit Temp")], [("temperature", "gpu_temp_tlimit")]),
    ("tlimit_slowdown_c", integer, [("Temperature", "GPU Slowdown T.Limit Temp")],
     [("temperature", "gpu_temp_slow_tlimit_threshold")]),
    ("tlimit_shutdown_c", integer, [("Temperature", "GPU Shutdown T.Limit Temp")],
     [("temperature", "gpu_temp_max_tlimit_threshold")]),
    ("tlimit_max_operating_c", integer, [("Temperature", "GPU Max Operating T.Limit Temp")],
     [("temperature", "gpu_temp_max_gpu_tlimit_threshold")]),
    ("memory_temperature_c", integer, [("Temperature", "Memory Current Temp")],
     [("temperature", "memory_temp")]),
    ("ecc_mode_current", flag, [("ECC Mode", "Current")], [("ecc_mode", "current_ecc")]),
    ("ecc_mode_pending", flag, [("ECC Mode", "Pending")], [("ecc_mode", "pending_ecc")]),
    ("retired_pages_single_bit", integer, [("Retired Pages", "Single Bit ECC")],
     [("retired_pages", "multiple_single_bit_retirement", "retired_count")]),
    ("retired_pages_double_bit", integer, [("Retired Pages", "Double Bit ECC")],
     [("retired_pages", "double_bit_retirement", "retired_count")]),
    ("retired_pages_pending", flag, [("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending")],
     [("retired_pages", "pending_blacklist"), ("retired_pages", "pending_retirement")]),
    ("remapped_rows_correctable", integer, [("Remapped Rows", "Correctable Error")],
     [("remapped_rows", "remapped_row_corr")]),
    ("remapped_rows_uncorrectable", integer, [("Remapped Rows", "Uncorrectable Error")],
     [("remapped_rows", "remapped_row_unc")]),
    ("remapped_rows_pending", flag, [("Remapped Rows", "Pending")], [("remapped_rows", "remapped_row_pending")]),
    ("remapped_rows_failure", flag, [("Remapped Rows", "Remapping Failure Occurred")],
     [("remapped_rows", "remapped_row_failure")]),
    ("pcie_gen_current", integer, [("PCI", "GPU Link Info", "PCIe Generation", "Current")],
     [("pci", "pci_gpu_link_info", "pcie_gen", "current_link_gen")]),
    ("pcie_gen_max", integer, [("PCI", "GPU Link Info", "PCIe Generation", "Max")],
     [("pci", "pci_gpu_link_info", "pcie_gen", "max_link_gen")]),
    ("pcie_gen_device_max", integer, [("PCI", "GPU Link Info", "PCIe Generation", "Device Max")],
     [("pci", "pci_gpu_link_info", "pcie_gen", "max_device_link_gen")]),
    ("pcie_gen_host_max", integer, [("PCI", "GPU Link Info", "PCIe Generation", "Host Max")],
     [("pci", "pci_gpu_link_info", "pcie_gen", "max_host_link_gen")]),
    ("pcie_width_current", _width, [("PCI", "GPU Link Info", "Link Width", "Current")],
     [("pci", "pci_gpu_link_info", "link_widths", "current_link_width")]),
    ("pcie_width_max", _width, [("PCI", "GPU Link Info", "Link Width", "Max")],
     [("pci", "pci_gpu_link_info", "link_widths", "max_link_width")]),
    ("fabric_state", known, [("Fabric", "State")], [("fabric", "state")]),
    ("fabric_status", known, [("Fabric", "Status")], [("fabric", "status")]),
    ("fabric_bandwidth", known, [("Fabric", "Health", "Bandwidth")], [("fabric", "health", "bandwidth")]),
    ("fabric_health", known, [("Fabric", "Health", "Summary")], [("fabric", "health", "summary")]),
]

# Clock event reasons of hardware or thermal slowdown: a fault to look at when they hold a GPU down
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
# NVIDIA's policies that limit clocks (nvml.h 13.x: the board limit, 0x200, and reliability, 0x400): no fault
POLICY_REASONS = ("board_limit", "reliability")
# ... and with the power cap and the policies, the reasons under which a GPU runs below its locked clock by design:
# the lock still holds, and the clock returns to it when the reason clears
HOLDING_REASONS = ("sw_power_cap",) + THROTTLE_REASONS + POLICY_REASONS

_REASON_NAMES = {
    "idle": "gpu_idle", "gpu_idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap", "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown", "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost", "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


def _leaves(tree: object, prefix: Tuple[str, ...] = ()) -> List[Tuple[Tuple[str, ...], str]]:
    if isinstance(tree, dict):
        out = []
        for key, val in tree.items():
            if key == "":
                out.append((prefix, val))
            else:
                out.extend(_leaves(val, prefix + (key,)))
        return out
    return [(prefix, tree)] if isinstance(tree, str) else []


def _clock_event_reasons(tree: Tree, xml: bool) -> Optional[List[str]]:
    section = None
    for key in (("clocks_event_reasons", "clocks_throttle_reasons") if xml
                else ("Clocks Event Reasons", "Clocks Throttle Reasons")):
        if key in tree:
            section = tree[key]
            break
    if not isinstance(section, dict):
        return None
    active: List[str] = []
    seen = False
    for path, value in _leaves(section):
        raw = path[-1]
        if xml:
            name = re.sub(r"^clocks_(event|throttle)_reason_", "", raw)
        else:
            name = _REASON_NAMES.get(raw.lower())
        state = flag(value)
        if name is None or state is None:
            continue
        seen = True
        if state:
            active.append(name)
    return active if seen else None


def _ecc_counts(tree: Tree, xml: bool, scope: str) -> Tuple[Optional[int], Optional[int]]:
    """(corrected, uncorrected) over every memory in one scope (volatile or aggregate)."""
    errors = tree.get("ecc_errors" if xml else "ECC Errors")
    if not isinstance(errors, dict):
        return None, None
    section = errors.get(scope if xml else scope.capitalize())
    if not isinstance(section, dict):
        return None, None
    corrected = uncorrected = None
    for path, value in _leaves(section):
        words = " ".join(path).lower().replace("_", " ")
        count = integer(value)
        if count is None or "threshold" in words:
            continue
        if "single bit" in words or "double bit" in words:
            if path[-1].lower() != "total":      # pre-Ampere: only the per-kind totals count
                continue
            is_uncorrected = "double bit" in words
        elif "uncorrectable" in words:
            is_uncorrected = True
        elif "correctable" in words:
            is_uncorrected = False
        else:
            continue
        if is_uncorrected:
            uncorrected = (uncorrected or 0) + count
        else:
            corrected = (corrected or 0) + count
    return corrected, uncorrected


def gpu_fields(tree: Tree, xml: bool) -> Dict[str, object]:
    """Every field the report gives for one GPU (a field it could not report is absent)."""
    fields: Dict[str, object] = {}
    for name, convert, text_paths, xml_paths in FIELDS:
        for path in (xml_paths if xml else text_paths):
            raw = _get(tree, path)
            if raw is not None:
                value = convert(raw)
                if value is not None:
                    fields[name] = value
                    break
    fields["unreadable"] = unreadable(tree) or None
    fields["clock_event_reasons"] = _clock_event_reasons(tree, xml)
    fields["ecc_volatile_corrected"], fields["ecc_volatile_uncorrected"] = _ecc_counts(tree, xml, "volatile")
    fields["ecc_aggregate_corrected"], fields["ecc_aggregate_uncorrected"] = _ecc_counts(tree, xml, "aggregate")
    return fields


def unreadable(tree: Tree) -> List[str]:
    """Where the report holds an error instead of a value ('Product Brand = Unknown Error'), benign ones aside."""
    return ["%s = %s" % (" / ".join(path), value.strip()) for path, value in _leaves(tree)
            if is_error(value) and not any(part in _BENIGN_ERRORS for part in path)]


# sections of one GPU's report: a pasted excerpt holding one of them is one GPU's, bus id or not
GPU_SECTIONS = {field[2][0][0] for field in FIELDS} | {"Clocks Event Reasons", "Clocks Throttle Reasons",
                                                       "ECC Errors", "GPU Link Info", "Product Brand"}


def parse_text(text: str) -> Tuple[Dict[str, Optional[str]], List[Tuple[Optional[str], Dict[str, object]]]]:
    """(driver/CUDA header, [(bus id, fields)]) of a `-q` text report. An excerpt without a 'GPU <bus id>'
    line whose fields belong to a GPU (a pasted 'Remapped Rows' block) is one GPU of unknown bus id."""
    header, blocks = split_text_gpus(text)
    # driver 610 words them "KMD Version" and "CUDA UMD Version"
    top = {"driver_version": known(_get(header, ("Driver Version",)) or _get(header, ("KMD Version",))),
           "cuda_version": known(_get(header, ("CUDA Version",)) or _get(header, ("CUDA UMD Version",))),
           "attached_gpus": integer(_get(header, ("Attached GPUs",)))}
    if not blocks and GPU_SECTIONS & set(header):
        blocks = [(None, header)]
    return top, [(bus, gpu_fields(tree, xml=False)) for bus, tree in blocks]


def parse_xml(text: str):
    """(driver/CUDA header, [(bus id, fields, element)]) of a `-q -x` report; ET.ParseError if malformed."""
    import xml.etree.ElementTree as ET   # only XML reports pay for it
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    top = {"driver_version": known(root.findtext("driver_version")),
           "cuda_version": known(root.findtext("cuda_version")),
           "attached_gpus": integer(root.findtext("attached_gpus"))}
    gpus = []
    for element in root.findall("gpu"):
        fields = gpu_fields(_xml_to_tree(element), xml=True)
        fields["supported_clocks"] = xml_supported_clocks(element)
        gpus.append((element.get("id"), fields, element))
    return top, gpus


def xml_supported_clocks(element) -> Optional[List[Dict[str, object]]]:
    """[{'memory': MHz, 'graphics': [MHz, ...]}] per supported memory clock, or None."""
    section = element.find("supported_clocks")
    if section is None:
        return None
    pairs = []
    for mem in section.findall("supported_mem_clock"):
        mem_mhz = integer(mem.findtext("value"))
        if mem_mhz is None:
            continue
        graphics = [g for g in (integer(e.text) for e in mem.findall("supported_graphics_clock")) if g is not None]
        pairs.append({"memory": mem_mhz, "graphics": graphics})
    return pairs or None
