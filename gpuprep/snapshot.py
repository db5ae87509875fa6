"""The typed snapshot of one host: everything gpuprep knows, nothing it judged.

`None` means *unknown* (not supported by that GPU, not captured, not readable) and is a
first-class value: rules must treat it as "cannot tell", never as zero or "off".
Snapshots round-trip through JSON; the document carries a `schema` version so a newer
file is refused with a clear message instead of being half-read.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .errors import BadInput

SCHEMA = "gpuprep.snapshot/1"
# what the probe prints instead of a snapshot when it could not take one: the host, a status and the problem, as data
PROBE_ERROR_SCHEMA = "gpuprep.probe-error/1"
SCHEMA_MAJOR = 1


@dataclass
class ClockPair:
    """One supported memory clock and the graphics clocks allowed with it (MHz)."""
    mem_mhz: int
    graphics_mhz: List[int] = field(default_factory=list)


@dataclass
class NvLink:
    link: int
    active: Optional[bool] = None
    version: Optional[int] = None
    speed_gbps: Optional[float] = None


@dataclass
class Gpu:
    index: Optional[int]               # None: a GPU named only by its bus id, or a pasted fragment of one
    name: Optional[str] = None
    uuid: Optional[str] = None
    serial: Optional[str] = None
    pci_bus_id: Optional[str] = None
    architecture: Optional[str] = None
    compute_capability: Optional[str] = None
    vbios_version: Optional[str] = None
    inforom_image: Optional[str] = None
    gsp_firmware: Optional[str] = None  # None also where the GPU runs without GSP firmware ("N/A")
    memory_total_mib: Optional[int] = None
    persistence_mode: Optional[bool] = None
    compute_mode: Optional[str] = None
    mig_mode_current: Optional[bool] = None
    mig_mode_pending: Optional[bool] = None
    mig_devices: Optional[int] = None
    # clocks, MHz
    clock_graphics_mhz: Optional[int] = None
    clock_sm_mhz: Optional[int] = None
    clock_mem_mhz: Optional[int] = None
    app_clock_graphics_mhz: Optional[int] = None
    app_clock_mem_mhz: Optional[int] = None
    default_app_clock_graphics_mhz: Optional[int] = None
    default_app_clock_mem_mhz: Optional[int] = None
    max_clock_graphics_mhz: Optional[int] = None
    max_clock_sm_mhz: Optional[int] = None
    max_clock_mem_mhz: Optional[int] = None
    supported_clocks: Optional[List[ClockPair]] = None
    # power, W
    power_draw_w: Optional[float] = None
    power_limit_w: Optional[float] = None
    power_default_limit_w: Optional[float] = None
    power_enforced_limit_w: Optional[float] = None
    power_min_limit_w: Optional[float] = None
    power_max_limit_w: Optional[float] = None
    # temperatures, C
    temperature_c: Optional[int] = None
    temperature_slowdown_c: Optional[int] = None
    temperature_shutdown_c: Optional[int] = None
    temperature_max_operating_c: Optional[int] = None
    memory_temperature_c: Optional[int] = None
    # T.Limit (R550+ drivers, in place of the absolute thresholds above): the margin, in C, between the GPU's
    # temperature and its T.Limit (its maximum operating temperature), and the margins at which it slows down,
    # shuts down, and may run below base clock (nvidia-smi -q: GPU T.Limit Temp, GPU Slowdown T.Limit Temp, ...)
    tlimit_margin_c: Optional[int] = None
    tlimit_slowdown_c: Optional[int] = None
    tlimit_shutdown_c: Optional[int] = None
    tlimit_max_operating_c: Optional[int] = None
    # active clock event (throttle) reasons by NVML name, e.g. "hw_slowdown"; None = unknown
    clock_event_reasons: Optional[List[str]] = None
    # ECC
    ecc_mode_current: Optional[bool] = None
    ecc_mode_pending: Optional[bool] = None
    ecc_volatile_corrected: Optional[int] = None
    ecc_volatile_uncorrected: Optional[int] = None
    ecc_aggregate_corrected: Optional[int] = None
    ecc_aggregate_uncorrected: Optional[int] = None
    # pre-Ampere page retirement
    retired_pages_single_bit: Optional[int] = None
    retired_pages_double_bit: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    # Ampere+ row remapping
    remapped_rows_correctable: Optional[int] = None
    remapped_rows_uncorrectable: Optional[int] = None
    remapped_rows_pending: Optional[bool] = None
    remapped_rows_failure: Optional[bool] = None
    # PCIe
    pcie_gen_current: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_gen_device_max: Optional[int] = None
    pcie_gen_host_max: Optional[int] = None
    pcie_width_current: Optional[int] = None
    pcie_width_max: Optional[int] = None
    nvlinks: Optional[List[NvLink]] = None
    # NVLink fabric registration (NVSwitch systems): state Completed/In Progress/Not Started, status Success/...
    fabric_state: Optional[str] = None
    fabric_status: Optional[str] = None
    fabric_bandwidth: Optional[str] = None   # the fabric's health: Full, or Degraded (an NVLink to the switches down)
    # the driver's fabric health summary (nvidia-smi -q's Fabric Health Summary, NVML's fabric info v3): Healthy |
    # Unhealthy | Limited Capacity
    fabric_health: Optional[str] = None
    # the fabric health mask's conditions that hold (route recovery in progress, route unhealthy, access timeout
    # recovery, "incorrect configuration: ...", global fabric manager disconnected); [] when the mask reports none,
    # None when it cannot say (older drivers, no fabric)
    fabric_health_flags: Optional[List[str]] = None
    numa_node: Optional[int] = None
    cpu_affinity: Optional[str] = None
    # the GPU failing to answer: why it could not be queried at all ("GPU is lost", "Unknown Error" for its
    # handle, "GPU requires reset"), and the fields it reported as an error instead of a value (ERR!, ...)
    failure: Optional[str] = None
    unreadable: Optional[List[str]] = None
    # NVML counts it but this process may not open it (NO_PERMISSION: another Slurm job's GPU behind the cgroup)
    not_permitted: Optional[bool] = None


@dataclass
class NvmlStatus:
    """Whether the NVIDIA management library answered, and if not, why."""
    available: Optional[bool] = None
    # not-installed (no NVIDIA userspace) | driver-not-loaded (userspace present, the driver does not answer)
    # | library-not-found | version-mismatch | no-permission | no-devices | error
    reason: Optional[str] = None
    message: Optional[str] = None
    library_version: Optional[str] = None
    attached_gpus: Optional[int] = None     # how many GPUs nvidia-smi's report header says it covers


@dataclass
class System:
    hostname: Optional[str] = None
    os_name: Optional[str] = None
    os_version: Optional[str] = None
    kernel: Optional[str] = None
    kernel_cmdline: Optional[str] = None
    arch: Optional[str] = None
    cpu_model: Optional[str] = None
    sockets: Optional[int] = None
    cores: Optional[int] = None
    threads: Optional[int] = None
    # each physical core's logical CPUs as a cpulist ("0,112"), from /sys (the launch plan's SMT siblings)
    thread_siblings: Optional[List[str]] = None
    memory_total_mib: Optional[int] = None
    swap_total_mib: Optional[int] = None


@dataclass
class NumaNode:
    node: int
    cpulist: Optional[str] = None
    memory_mib: Optional[int] = None


@dataclass
class Nic:
    name: str
    pci_bus_id: Optional[str] = None
    numa_node: Optional[int] = None
    speed_mbps: Optional[int] = None
    operstate: Optional[str] = None
    rdma_device: Optional[str] = None


@dataclass
class RdmaDevice:
    """One port of an RDMA device (InfiniBand or RoCE), as /sys, ibstat, ibv_devinfo or ibdev2netdev show it."""
    name: str
    link_layer: Optional[str] = None   # InfiniBand | Ethernet
    state: Optional[str] = None        # e.g. "4: ACTIVE" (/sys), "Active" (ibstat), "PORT_ACTIVE (4)" (ibv_devinfo)
    rate_gbps: Optional[float] = None
    numa_node: Optional[int] = None
    netdev: Optional[str] = None
    port: Optional[int] = None
    phys_state: Optional[str] = None   # e.g. "5: LinkUp", "Polling", "LINK_UP (5)"
    model: Optional[str] = None        # the HCA's part: "MT4129" (ConnectX-7)
    firmware: Optional[str] = None     # fw_ver, e.g. "28.39.1002"
    netdev_up: Optional[bool] = None   # ibdev2netdev's (Up)/(Down)
    gid: Optional[str] = None          # GID index 0: a RoCE port without one cannot be used
    pcie_speed: Optional[str] = None   # the device's PCIe link now and at most, as /sys words it ("16.0 GT/s PCIe")
    pcie_speed_max: Optional[str] = None
    pcie_width: Optional[int] = None
    pcie_width_max: Optional[int] = None


@dataclass
class FabricManager:
    """NVIDIA Fabric Manager, which NVSwitch systems need before CUDA can use their GPUs (error 802 until then):
    from systemd, `nv-fabricmanager --version` and its log, live or from captures."""
    nvswitch: Optional[bool] = None          # NVSwitch devices seen (/dev/nvidia-nvswitch*, the NVSwitch driver)
    installed: Optional[bool] = None         # the unit or binary is there
    state: Optional[str] = None              # systemd: active | failed | inactive | activating | ...
    version: Optional[str] = None            # "Fabric Manager version is : 535.104.05"
    mismatch: Optional[List[str]] = None     # [FM's driver interface version, the driver's] from its refusal to start
    configured: Optional[bool] = None        # "Successfully configured all the available NVSwitches"
    errors: Optional[List[str]] = None       # its own error lines (bounded)


@dataclass
class ImexNode:
    """One node of an IMEX domain as `nvidia-imex-ctl -N` lists it."""
    index: int
    address: str
    status: str                              # READY | UNAVAILABLE | INITIALIZING | WAITING_FOR_PEERS | ...
    version: Optional[str] = None            # newer IMEX print each node's version ("570.172"); empty when unknown
    local: Optional[bool] = None             # the node the command ran on (`* address *`)


@dataclass
class Imex:
    """NVIDIA IMEX, which multi-node NVLink systems (GB200/GB300 NVL72) need to share GPU memory across trays:
    its systemd unit, `nvidia-imex-ctl -N` (the domain, each node, the connection table) or `-q`, and its log."""
    installed: Optional[bool] = None
    state: Optional[str] = None              # systemd: active | failed | inactive | ...
    configured_nodes: Optional[int] = None   # addresses in /etc/nvidia-imex/nodes_config.cfg
    query: Optional[str] = None              # `nvidia-imex-ctl -q`: READY, another daemon state, or its error
    domain: Optional[str] = None             # "Domain State:": UP | DEGRADED | DOWN
    nodes: Optional[List[ImexNode]] = None
    links: Optional[List[str]] = None        # connections not Connected: "0->3 N" (the table's own letter)
    errors: Optional[List[str]] = None       # its own [ERROR]/[FATAL] log lines (bounded)


@dataclass
class DcgmTest:
    """One test of `dcgmi diag`, in DCGM's own words: its status (Pass, Fail, Warn, Skip) and messages."""
    name: str
    status: str
    category: Optional[str] = None
    gpus: Optional[str] = None
    messages: Optional[List[str]] = None


@dataclass
class Dcgm:
    """NVIDIA DCGM's verdict where the host has it: `dcgmi diag -r N -j` test by test, `dcgmi health -c -j`."""
    version: Optional[str] = None
    level: Optional[int] = None
    tests: Optional[List[DcgmTest]] = None
    health: Optional[str] = None                 # Healthy | Warning | Failure
    incidents: Optional[List[str]] = None
    health_failed: Optional[str] = None          # `dcgmi health -c` was asked and gave no report: why (no health
                                                 # watches enabled, no host engine, ...): the health is unknown
    missing: Optional[str] = None                # why DCGM was not asked (dcgmi not installed): information
    failed: Optional[str] = None                 # DCGM was asked and failed: a non-zero exit (226: NVVS error),
                                                 # a hang, an answer that is no report; what it did say is partial
    truncated: Optional[bool] = None             # a captured report cut short: the tests not shown are unknown


@dataclass
class Settings:
    cpu_governors: Optional[List[str]] = None   # distinct governors across CPUs
    thp_enabled: Optional[str] = None           # always | madvise | never
    thp_defrag: Optional[str] = None
    numa_balancing: Optional[int] = None
    swappiness: Optional[int] = None
    memlock_soft: Optional[str] = None          # bytes as text, or "unlimited"
    memlock_hard: Optional[str] = None
    shm_size_mib: Optional[int] = None
    iommu_groups: Optional[int] = None
    # sshd's effective settings (`sshd -T`, keywords in lower case) that decide how the node can be logged into
    sshd: Optional[Dict[str, str]] = None


@dataclass
class TorchInfo:
    version: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    arch_list: Optional[List[str]] = None


@dataclass
class Toolkit:
    path: str
    version: Optional[str] = None


@dataclass
class Software:
    driver_version: Optional[str] = None
    kernel_module_version: Optional[str] = None
    kernel_module_flavor: Optional[str] = None   # open | proprietary: NVIDIA's "UNIX Open Kernel Module" or not
    cuda_driver_version: Optional[str] = None
    cuda_toolkits: Optional[List[Toolkit]] = None
    cudnn_version: Optional[str] = None
    nccl_version: Optional[str] = None
    nccl_cuda_major: Optional[int] = None      # the CUDA major an NCCL pip wheel was built for (nvidia-nccl-cuXX)
    torch: Optional[TorchInfo] = None
    container_toolkit_version: Optional[str] = None


@dataclass
class PciDevice:
    """A bridge, GPU or RDMA NIC from `lspci -vvv` (parsers/lspci_vvv.py): bus range, port type, ACS control bits."""
    bdf: str = ""
    kind: str = ""                       # lspci's class: "PCI bridge", "3D controller", ...
    name: str = ""
    port: Optional[str] = None           # PCIe port type: "Downstream Port", "Root Port", ...
    secondary: Optional[int] = None
    subordinate: Optional[int] = None
    acs_ctl: Optional[Dict[str, bool]] = None
    denied: bool = False                 # lspci could not read the capabilities (not root)


@dataclass
class CommandRun:
    """One bounded command gpuprep ran: its argument list, exit code (None: it did not finish) and output."""
    argv: List[str] = field(default_factory=list)
    rc: Optional[int] = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class Smoke:
    """`check --deep`: the GPU smoke container and the limits probe (common/container_smoke.py)."""
    image: Optional[str] = None
    error: Optional[str] = None
    gpu: Optional[CommandRun] = None
    limits: Optional[CommandRun] = None


@dataclass
class Container:
    docker_reachable: Optional[bool] = None
    docker_version: Optional[str] = None
    runtimes: Optional[List[str]] = None
    default_runtime: Optional[str] = None
    error: Optional[str] = None
    smoke: Optional[Smoke] = None


@dataclass
class Topology:
    """`nvidia-smi topo -m`: link type between every pair of devices (GPU0.., NIC0..)."""
    devices: List[str] = field(default_factory=list)
    matrix: Dict[str, Dict[str, str]] = field(default_factory=dict)
    nic_names: Dict[str, str] = field(default_factory=dict)
    cpu_affinity: Dict[str, str] = field(default_factory=dict)
    numa_affinity: Dict[str, Optional[int]] = field(default_factory=dict)

    def gpus(self) -> List[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    def nics(self) -> List[str]:
        return [d for d in self.devices if not d.startswith("GPU")]


@dataclass
class XidEvent:
    code: int
    pci: Optional[str] = None
    kind: str = "xid"                  # xid | sxid
    time: Optional[str] = None
    pid: Optional[str] = None
    process: Optional[str] = None
    message: Optional[str] = None


@dataclass
class Snapshot:
    schema: str = SCHEMA
    sources: List[str] = field(default_factory=list)
    collected_at: Optional[str] = None
    system: System = field(default_factory=System)
    numa_nodes: Optional[List[NumaNode]] = None
    nics: Optional[List[Nic]] = None
    interfaces: Optional[Dict[str, str]] = None      # every network interface -> operstate
    rdma_devices: Optional[List[RdmaDevice]] = None
    kernel_modules: Optional[Dict[str, bool]] = None
    settings: Settings = field(default_factory=Settings)
    env: Optional[Dict[str, str]] = None
    software: Software = field(default_factory=Software)
    container: Container = field(default_factory=Container)
    nvml: NvmlStatus = field(default_factory=NvmlStatus)
    gpus: Optional[List[Gpu]] = None
    topology: Optional[Topology] = None
    xids: Optional[List[XidEvent]] = None
    pci: Optional[List[PciDevice]] = None
    fabric_manager: FabricManager = field(default_factory=FabricManager)
    dcgm: Dcgm = field(default_factory=Dcgm)
    imex: Imex = field(default_factory=Imex)
    # how each capture cut short was cut ("smi.txt: the nvidia-smi table ends inside its last GPU's rows"): what it
    # shows is judged (a failure seen is a failure), and the rest is not known
    incomplete: Optional[List[str]] = None

    # -- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict, origin: str = "snapshot") -> "Snapshot":
        if not isinstance(data, dict) or "schema" not in data:
            raise BadInput(f"{origin}: not a gpuprep snapshot (no 'schema' field)")
        schema = str(data["schema"])[:80]
        name, _, version = schema.partition("/")
        if name != "gpuprep.snapshot" or not re.fullmatch(r"[0-9]{1,4}", version):
            raise BadInput(f"{origin}: unknown snapshot schema {schema!r}")
        if int(version) > SCHEMA_MAJOR:
            raise BadInput(f"{origin}: snapshot schema {schema} is newer than this gpuprep reads "
                           f"({SCHEMA}); upgrade gpuprep")
        try:
            return _build(cls, data)
        except (TypeError, ValueError, KeyError) as exc:
            raise BadInput(f"{origin}: malformed snapshot: {exc}") from None

    @classmethod
    def from_json(cls, text: str, origin: str = "snapshot") -> "Snapshot":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except RecursionError:
            raise BadInput(f"{origin}: JSON nested too deeply to be a snapshot") from None
        return cls.from_dict(data, origin)

    # -- helpers ----------------------------------------------------------------------
    def gpu_count(self) -> int:
        return len(self.gpus or [])

    def gpu_by_bus(self, bus_id: str) -> Optional[Gpu]:
        key = normalize_bus_id(bus_id)
        for gpu in self.gpus or []:
            if gpu.pci_bus_id and normalize_bus_id(gpu.pci_bus_id) == key:
                return gpu
        return None


# Counts and sizes that cannot be below zero; a negative one is a corrupted capture or snapshot, never a
# reason to fail a GPU (a negative error count once read as "errors" and earned RMA advice)
_SIGNED_GPU_FIELDS = {"tlimit_margin_c", "tlimit_slowdown_c", "tlimit_shutdown_c", "tlimit_max_operating_c",
                      "temperature_c", "temperature_slowdown_c", "temperature_shutdown_c",
                      "temperature_max_operating_c", "memory_temperature_c"}


def out_of_range(snap: "Snapshot") -> Optional[str]:
    """The first value no GPU can have ('gpus[2].ecc_volatile_uncorrected = -3'), or None."""
    for position, gpu in enumerate(snap.gpus or []):
        for f in dataclasses.fields(gpu):
            value = getattr(gpu, f.name)
            if f.name not in _SIGNED_GPU_FIELDS and isinstance(value, (int, float)) \
                    and not isinstance(value, bool) and value < 0:
                return f"gpus[{position}].{f.name} = {value}: cannot be negative"
    return None


def normalize_bus_id(bus_id: str) -> str:
    """'00000000:18:00.0', '0000:18:00.0' and kernel-log 'PCI:0000:18:00' name the same device."""
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 3:
        domain, bus, devfn = parts
    elif len(parts) == 2:
        domain, (bus, devfn) = "0", parts
    else:
        return text
    device = devfn.split(".")[0]
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


# --- generic dataclass construction from JSON -----------------------------------------

_INT_LIMIT = 1 << 63      # no count, size or clock reaches it; a 400-digit number is damage, not data
# the most items a snapshot's lists may hold: far above any host (the largest boards have 16 GPUs, thousands of
# CPUs, a few thousand kernel log events), far below what would take the judging minutes and gigabytes
_LIST_LIMITS = {"gpus": 1024}
_LIST_LIMIT = 100_000


def build(tp, value, path: str = ""):
    """A dataclass `tp` from JSON-shaped `value`, every field's type checked: TypeError names the JSON path of the
    first bad one ('gpus[2].temperature_c: expected int, got 'hot'')."""
    return _build(tp, value, path)


def _at(path: str, message: str) -> TypeError:
    return TypeError(f"{path}: {message}" if path else message)


def _build(tp, value, path: str = ""):
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], value, path)
    if origin in (list, List):
        return _build_list(typing.get_args(tp)[0], value, path)
    if origin in (dict, Dict):
        return _build_dict(typing.get_args(tp)[1], value, path)
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, path)
    return _scalar(tp, value, path)


def _build_list(item, value, path: str):
    if not isinstance(value, list):
        raise _at(path, f"expected a list, got {type(value).__name__}")
    limit = _LIST_LIMITS.get(path, _LIST_LIMIT)
    if len(value) > limit:
        raise _at(path, f"{len(value)} items, more than any host has (at most {limit})")
    if dataclasses.is_dataclass(item) and any(v is None for v in value):
        raise _at(f"{path}[{value.index(None)}]", "expected an object, got null")
    return [_build(item, v, f"{path}[{i}]") for i, v in enumerate(value)]


def _build_dict(item, value, path: str):
    if not isinstance(value, dict):
        raise _at(path, f"expected an object, got {type(value).__name__}")
    return {str(k): _build(item, v, f"{path}.{k}") for k, v in value.items()}


def _build_dataclass(tp, value, path: str):
    if not isinstance(value, dict):
        raise _at(path, f"expected an object, got {type(value).__name__}")
    hints = _hints(tp)
    known = {f.name for f in dataclasses.fields(tp)}
    # a section written as null is an unknown section: its defaults (every field unknown), not None
    kwargs = {k: _build(hints[k], v, f"{path}.{k}" if path else k) for k, v in value.items()
              if k in known and not (v is None and dataclasses.is_dataclass(hints[k]))}
    for name, text in kwargs.items():
        form = _FORMATS.get((tp.__name__, name))
        if form and isinstance(text, str) and not form[0].fullmatch(text):
            raise _at(f"{path}.{name}" if path else name, f"{text[:40]!r} is not {form[1]}")
    try:
        return tp(**kwargs)
    except TypeError as exc:            # a required field missing
        raise _at(path, f"{tp.__name__}: {exc}") from None


# strings the rules read as numbers or addresses: a saved file's value is checked against its form on load, so
# a rule never meets "nine" where a compute capability belongs
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_VERSION = r"\d{1,4}(\.\d{1,6}){0,3}"
_FORMATS = {
    ("Gpu", "pci_bus_id"): (re.compile(_BUS_ID), "a PCI bus id like 00000000:3B:00.0"),
    ("Gpu", "compute_capability"): (re.compile(r"\d{1,2}\.\d{1,2}"), "a compute capability like 9.0"),
    ("XidEvent", "pci"): (re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(\.[0-9A-Fa-f])?"),
                          "a PCI address like 0000:3b:00"),
    ("Software", "driver_version"): (re.compile(_VERSION), "a driver version like 550.90.07"),
    ("Software", "cuda_driver_version"): (re.compile(_VERSION), "a CUDA version like 12.4"),
    ("TorchInfo", "cuda"): (re.compile(_VERSION), "a CUDA version like 12.4"),
    ("TorchInfo", "version"): (re.compile(r"\d{1,3}\.\d{1,3}[0-9A-Za-z.+_-]{0,60}"), "a PyTorch version like 2.5.1+cu124"),
    ("Toolkit", "version"): (re.compile(_VERSION), "a CUDA toolkit version like 12.4.131"),
}


def _in_range(value, path: str) -> None:
    if abs(value) >= _INT_LIMIT:
        raise _at(path, f"a number of {len(str(abs(value)))} digits is out of range")


def _scalar(tp, value, path: str):
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        _in_range(value, path)
        value = float(value)
    if tp in (int, float, str, bool) and (not isinstance(value, tp) or (tp is int and isinstance(value, bool))):
        shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
        raise _at(path, f"expected {tp.__name__}, got {shown[:60]}")
    if tp is int:
        _in_range(value, path)
    if tp in (int, float) and not math.isfinite(value):
        raise _at(path, f"expected a finite number, got {value!r}")
    return value


_HINTS: dict = {}


def _hints(tp):
    if tp not in _HINTS:
        _HINTS[tp] = typing.get_type_hints(tp, vars(sys.modules[tp.__module__]))
    return _HINTS[tp]


# --- combining partial snapshots (several captures of one host) ------------------------

def merge(base: Snapshot, extra: Snapshot) -> Snapshot:
    """Fill what `base` does not know from `extra`. GPUs pair up by bus id, then UUID, then
    index; Xid events add up; the first known value of any other field wins."""
    out = _merge_value(base, extra)
    out.sources = base.sources + [s for s in extra.sources if s not in base.sources]
    out.gpus = _merge_gpus(base.gpus, extra.gpus)
    out.rdma_devices = _merge_ports(base.rdma_devices, extra.rdma_devices)
    if base.incomplete or extra.incomplete:
        out.incomplete = (base.incomplete or []) + (extra.incomplete or [])
    if base.xids is not None or extra.xids is not None:
        # the same kernel-log line given twice (two overlapping pastes) is one event
        out.xids = list({dataclasses.astuple(x): x for x in (base.xids or []) + (extra.xids or [])}.values())
    return out


def _merge_ports(base: Optional[List[RdmaDevice]], extra: Optional[List[RdmaDevice]]) -> Optional[List[RdmaDevice]]:
    """Two RDMA captures of one host (ibstatus with ibdev2netdev, ibv_devinfo -v with either): the same port (device
    and port number; a port-less entry goes to the device's only port) is one port with the fields of both, and
    every port of either is kept."""
    if base is None or extra is None:
        return base if extra is None else extra
    merged = list(base)
    for port in extra:
        same = [i for i, p in enumerate(merged) if p.name == port.name and
                (p.port == port.port or None in (p.port, port.port))]
        if len(same) == 1:
            merged[same[0]] = _merge_value(merged[same[0]], port)
        else:
            merged.append(port)
    return merged


def _different_gpus(base: Snapshot, extra: Snapshot) -> Optional[str]:
    """GPU counts, or GPU bus ids, that two captures of one host could not both show."""
    counts = gpu_count(base), gpu_count(extra)
    if None not in counts and counts[0] != counts[1]:
        return f"different GPU counts ({counts[0]}, {counts[1]})"
    buses = [{normalize_bus_id(g.pci_bus_id) for g in snap.gpus or [] if g.pci_bus_id} for snap in (base, extra)]
    if all(buses) and buses[0] != buses[1]:
        return f"different GPU bus ids ({', '.join(sorted(buses[0] ^ buses[1])[:4])} in one only)"
    return None


def mixed_hosts(base: Snapshot, extra: Snapshot) -> Optional[str]:
    """Why two partial snapshots cannot be one host's (None when they can): different host names, driver
    versions, GPU counts or GPU bus ids, or one bus id with two GPU UUIDs."""
    for what, a, b in (("host names", base.system.hostname, extra.system.hostname),
                       ("driver versions", base.software.driver_version, extra.software.driver_version)):
        if a and b and a != b:
            return f"different {what} ({a}, {b})"
    different = _different_gpus(base, extra)
    if different:
        return different
    uuids = {normalize_bus_id(g.pci_bus_id): g.uuid for g in base.gpus or [] if g.pci_bus_id and g.uuid}
    for gpu in extra.gpus or []:
        known = uuids.get(normalize_bus_id(gpu.pci_bus_id)) if gpu.pci_bus_id else None
        if known and gpu.uuid and known != gpu.uuid:
            return f"GPU {gpu.pci_bus_id} has two UUIDs ({known}, {gpu.uuid})"
    return None


def _merge_value(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        defaults = type(a)() if _all_defaulted(type(a)) else None
        kwargs = {}
        for f in dataclasses.fields(a):
            va, vb = getattr(a, f.name), getattr(b, f.name)
            if defaults is not None and va == getattr(defaults, f.name):
                va = None if not dataclasses.is_dataclass(va) else va
            kwargs[f.name] = _merge_value(va, vb)
        return type(a)(**kwargs)
    if isinstance(a, dict) and isinstance(b, dict):
        merged = dict(b)
        merged.update(a)
        return merged
    return a


def _all_defaulted(tp) -> bool:
    return all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in dataclasses.fields(tp))


def _merge_gpus(a: Optional[List[Gpu]], b: Optional[List[Gpu]]) -> Optional[List[Gpu]]:
    if a is None or b is None:
        return a if b is None else b
    merged = list(a)
    for gpu in b:
        match = None
        for i, known in enumerate(merged):
            if gpu.pci_bus_id and known.pci_bus_id:
                if normalize_bus_id(gpu.pci_bus_id) == normalize_bus_id(known.pci_bus_id):
                    match = i
                    break
            elif gpu.uuid and known.uuid and gpu.uuid == known.uuid:
                match = i
                break
            elif known.index is not None and known.index == gpu.index and not (gpu.uuid and known.uuid):
                match = i
                break
        if match is None:
            merged.append(gpu)
        else:
            merged[match] = _merge_value(merged[match], gpu)
    return sorted(merged, key=lambda g: (g.index is None, g.index or 0))


def gpu_count(snap: "Snapshot") -> Optional[int]:
    """How many GPUs the facts show: the GPUs listed, else the GPUs of a `topo -m` matrix; None when neither (a
    failed NVML lists none, but that is not a count of 0)."""
    if snap.gpus is not None and (snap.gpus or snap.nvml.available or snap.nvml.reason == "no-devices"):
        return len(snap.gpus)
    if snap.topology and snap.topology.gpus():
        return len(snap.topology.gpus())
    return None
