"""The one module that talks to NVML (through nvidia-ml-py).

Init failures (no driver, no library, driver/library mismatch, no permission) are recorded as a
reason, never raised. After init, every query is guarded on its own. Only three answers mean "this
field is unknown": NOT_SUPPORTED, NO_PERMISSION and FUNCTION_NOT_FOUND (nvml.h); every other error
(TIMEOUT, INSUFFICIENT_POWER, DRIVER_NOT_LOADED after a good init, GPU_IS_LOST, UNKNOWN, ...) is the GPU
failing and fails it. A query may name the further answers that mean "not there" for it alone (a link
index past the GPU's links, an empty MIG slot). A GPU NVML counts but this process may not open
(NO_PERMISSION: another job's GPU under Slurm's cgroups) is marked so, not failed; a count NVML cannot
give is a driver failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

from ..parsers.values import compress_cpulist
from ..snapshot import ClockPair, Gpu, NvLink, NvmlStatus

_INIT_REASONS = {
    "NVML_ERROR_DRIVER_NOT_LOADED": "driver-not-loaded",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "library-not-found",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "version-mismatch",
    "NVML_ERROR_NO_PERMISSION": "no-permission",
}

_ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
                  8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 13: "Rubin"}
_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
_REASON_BITS = [
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clocks_setting"),
    (0x200, "board_limit"), (0x400, "reliability"),
]
_NVLINK_VERSIONS = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
_CPU_SET_WORDS = 16   # 16 x 64 bits: enough for 1024 logical CPUs


@dataclass
class NvmlFacts:
    status: NvmlStatus
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None
    gpus: List[Gpu] = field(default_factory=list)


def load_library():
    """The real nvidia-ml-py module, or None when the package is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def probe(nvml: Any = None) -> NvmlFacts:
    nvml = nvml if nvml is not None else load_library()
    if nvml is None:
        return NvmlFacts(NvmlStatus(available=False, reason="not-installed",
                                    message="nvidia-ml-py is not installed"))
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return NvmlFacts(NvmlStatus(available=False, reason=_init_reason(nvml, exc), message=str(exc)))
    except OSError as exc:
        return NvmlFacts(NvmlStatus(available=False, reason="library-not-found", message=str(exc)))
    try:
        return _read_all(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _init_reason(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    for const, reason in _INIT_REASONS.items():
        if code is not None and code == getattr(nvml, const, object()):
            return reason
    return "error"


def _read_all(nvml: Any) -> NvmlFacts:
    ask = _Asker(nvml)
    facts = NvmlFacts(NvmlStatus(available=True))
    facts.status.library_version = ask(getattr(nvml, "nvmlSystemGetNVMLVersion", None))
    facts.driver_version = _text(ask(getattr(nvml, "nvmlSystemGetDriverVersion", None)))
    cuda = ask(getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None)) or ask(getattr(nvml, "nvmlSystemGetCudaDriverVersion", None))
    if cuda:
        facts.cuda_driver_version = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        # the driver answered init and then cannot say how many GPUs it has: the driver is failing
        facts.status = NvmlStatus(available=False, reason="error", message=f"nvmlDeviceGetCount failed: {exc}",
                                  library_version=facts.status.library_version)
        return facts
    for index in range(count):
        facts.gpus.append(_open_and_read(nvml, ask, index))
    return facts


def _open_and_read(nvml: Any, ask: "_Asker", index: int) -> Gpu:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", object()):
            # nvml.h: counted, but this process may not talk to it (a Slurm job's cgroup hides the others)
            return Gpu(index=index, not_permitted=True)
        # lost or broken: still counted, and judged by what NVML said ("GPU is lost", "Unknown Error")
        return Gpu(index=index, failure=f"NVML cannot open it: {exc}")
    ask.fatal = []
    gpu = _read_gpu(nvml, ask, index, handle)
    if gpu.name is None and not ask.fatal:
        ask.fatal.append("NVML opened it but cannot name it")
    if ask.fatal:
        gpu.failure = ask.fatal[0] + (f" (and {len(ask.fatal) - 1} more queries)" if len(ask.fatal) > 1 else "")
    return gpu


# The only NVML answers that mean "this GPU cannot report this field" (nvml.h); any other error is the GPU
# (or its driver) failing: TIMEOUT, INSUFFICIENT_POWER (power cables), DRIVER_NOT_LOADED, GPU_IS_LOST, UNKNOWN...
_UNKNOWN_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND")


class _Asker:
    """Calls one NVML query. An answer in _UNKNOWN_CODES, or in the query's own `absent` codes (what nvml.h says
    that call answers for a thing that is not there), leaves the field unknown; any other error is kept in
    `fatal` so the caller fails the GPU instead of reporting it with every field unknown."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self.fatal: List[str] = []
        self._unknown = {getattr(nvml, name) for name in _UNKNOWN_CODES if hasattr(nvml, name)}

    def __call__(self, fn: Callable, *args, absent: tuple = ()):
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code not in self._unknown and code not in {getattr(self.nvml, name, None) for name in absent}:
                self.fatal.append(f"NVML answered '{exc}' to {getattr(fn, '__name__', 'a query')}")
            return None
        except (AttributeError, NotImplementedError):   # function missing in this driver/binding
            return None
        except UnicodeDecodeError:      # text that is not UTF-8 (nvidia-ml-py decodes it): not a value
            return None


_NO_SUCH = ("NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND")   # an index or key past what the GPU has


def _identity(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's name, UUID, serial, bus id, architecture, firmware."""
    gpu.name = _text(ask(getattr(nvml, "nvmlDeviceGetName", None), h))
    gpu.uuid = _text(ask(getattr(nvml, "nvmlDeviceGetUUID", None), h))
    gpu.serial = _text(ask(getattr(nvml, "nvmlDeviceGetSerial", None), h))
    pci = ask(getattr(nvml, "nvmlDeviceGetPciInfo", None), h)
    gpu.pci_bus_id = _text(pci.busId) if pci is not None else None
    arch = ask(getattr(nvml, "nvmlDeviceGetArchitecture", None), h)
    gpu.architecture = _ARCHITECTURES.get(arch) if arch is not None else None
    cc = ask(getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None), h)
    gpu.compute_capability = f"{cc[0]}.{cc[1]}" if cc else None
    gpu.vbios_version = _text(ask(getattr(nvml, "nvmlDeviceGetVbiosVersion", None), h))
    gpu.inforom_image = _text(ask(getattr(nvml, "nvmlDeviceGetInforomImageVersion", None), h))
    gpu.gsp_firmware = _text(ask(getattr(nvml, "nvmlDeviceGetGspFirmwareVersion", None), h))


def _modes(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's memory size, persistence, compute and MIG modes."""
    memory = ask(getattr(nvml, "nvmlDeviceGetMemoryInfo", None), h)
    gpu.memory_total_mib = memory.total // (1 << 20) if memory is not None else None
    gpu.persistence_mode = _enabled(nvml, ask(getattr(nvml, "nvmlDeviceGetPersistenceMode", None), h))
    mode = ask(getattr(nvml, "nvmlDeviceGetComputeMode", None), h)
    gpu.compute_mode = _COMPUTE_MODES.get(mode) if mode is not None else None
    mig = ask(getattr(nvml, "nvmlDeviceGetMigMode", None), h)
    if mig is not None:
        gpu.mig_mode_current, gpu.mig_mode_pending = bool(mig[0]), bool(mig[1])
    if gpu.mig_mode_current:
        slots = ask(getattr(nvml, "nvmlDeviceGetMaxMigDeviceCount", None), h) or 0
        gpu.mig_devices = sum(ask(getattr(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", None), h, i, absent=_NO_SUCH)
                              is not None for i in range(slots))


def _clocks(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's current, application, default and maximum clocks, and the supported pairs."""
    graphics, sm, mem = nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    gpu.clock_graphics_mhz = ask(getattr(nvml, "nvmlDeviceGetClockInfo", None), h, graphics)
    gpu.clock_sm_mhz = ask(getattr(nvml, "nvmlDeviceGetClockInfo", None), h, sm)
    gpu.clock_mem_mhz = ask(getattr(nvml, "nvmlDeviceGetClockInfo", None), h, mem)
    gpu.app_clock_graphics_mhz = ask(getattr(nvml, "nvmlDeviceGetApplicationsClock", None), h, graphics)
    gpu.app_clock_mem_mhz = ask(getattr(nvml, "nvmlDeviceGetApplicationsClock", None), h, mem)
    gpu.default_app_clock_graphics_mhz = ask(getattr(nvml, "nvmlDeviceGetDefaultApplicationsClock", None), h, graphics)
    gpu.default_app_clock_mem_mhz = ask(getattr(nvml, "nvmlDeviceGetDefaultApplicationsClock", None), h, mem)
    gpu.max_clock_graphics_mhz = ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, graphics)
    gpu.max_clock_sm_mhz = ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, sm)
    gpu.max_clock_mem_mhz = ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, mem)
    mem_clocks = ask(getattr(nvml, "nvmlDeviceGetSupportedMemoryClocks", None), h)
    if mem_clocks:
        gpu.supported_clocks = [
            ClockPair(mem_mhz=m, graphics_mhz=list(ask(getattr(nvml, "nvmlDeviceGetSupportedGraphicsClocks", None), h, m,
                                                       absent=_NO_SUCH) or []))
            for m in mem_clocks]


def _power(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's power draw and limits."""
    gpu.power_draw_w = _watts(ask(getattr(nvml, "nvmlDeviceGetPowerUsage", None), h))
    gpu.power_default_limit_w = _watts(ask(getattr(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", None), h))
    gpu.power_enforced_limit_w = _watts(ask(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None), h))
    # the limit the GPU is held to, as nvidia-smi -q prints it ("Current Power Limit"): the enforced one. The
    # management limit is only what was requested (a GH200 reads 900 W requested, 700 W enforced)
    requested = _watts(ask(getattr(nvml, "nvmlDeviceGetPowerManagementLimit", None), h))
    gpu.power_limit_w = gpu.power_enforced_limit_w if gpu.power_enforced_limit_w is not None else requested
    limits = ask(getattr(nvml, "nvmlDeviceGetPowerManagementLimitConstraints", None), h)
    if limits:
        gpu.power_min_limit_w, gpu.power_max_limit_w = _watts(limits[0]), _watts(limits[1])


def _thermal(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's temperatures, thresholds and why the clocks are held down."""
    gpu.temperature_c = ask(getattr(nvml, "nvmlDeviceGetTemperature", None), h, nvml.NVML_TEMPERATURE_GPU)
    gpu.temperature_slowdown_c = ask(getattr(nvml, "nvmlDeviceGetTemperatureThreshold", None), h,
                                     nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    gpu.temperature_shutdown_c = ask(getattr(nvml, "nvmlDeviceGetTemperatureThreshold", None), h,
                                     nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    gpu.temperature_max_operating_c = ask(getattr(nvml, "nvmlDeviceGetTemperatureThreshold", None), h,
                                          nvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)
    gpu.memory_temperature_c = _field_value(nvml, ask, h, nvml.NVML_FI_DEV_MEMORY_TEMP)
    # R550+ GPUs report the margin to T.Limit instead of absolute thresholds (nvmlDeviceGetMarginTemperature)
    gpu.tlimit_margin_c = ask(getattr(nvml, "nvmlDeviceGetMarginTemperature", None), h,
                              absent=("NVML_ERROR_ARGUMENT_VERSION_MISMATCH",))
    gpu.tlimit_shutdown_c, gpu.tlimit_slowdown_c, gpu.tlimit_max_operating_c = (
        _field_value(nvml, ask, h, getattr(nvml, f"NVML_FI_DEV_TEMPERATURE_{name}_TLIMIT", field))
        for name, field in (("SHUTDOWN", 193), ("SLOWDOWN", 194), ("GPU_MAX", 196)))
    reasons = ask(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None), h)
    if reasons is None:
        reasons = ask(getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None), h)
    if reasons is not None:
        gpu.clock_event_reasons = [name for bit, name in _REASON_BITS if reasons & bit]


def _ecc(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's ECC mode and error counts."""
    ecc = ask(getattr(nvml, "nvmlDeviceGetEccMode", None), h)
    if ecc is not None:
        gpu.ecc_mode_current, gpu.ecc_mode_pending = bool(ecc[0]), bool(ecc[1])
    corrected, uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    gpu.ecc_volatile_corrected = ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h, corrected, nvml.NVML_VOLATILE_ECC)
    gpu.ecc_volatile_uncorrected = ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h, uncorrected, nvml.NVML_VOLATILE_ECC)
    gpu.ecc_aggregate_corrected = ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h, corrected, nvml.NVML_AGGREGATE_ECC)
    gpu.ecc_aggregate_uncorrected = ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h, uncorrected,
                                        nvml.NVML_AGGREGATE_ECC)


def _memory_health(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's retired pages and remapped rows."""
    single = ask(getattr(nvml, "nvmlDeviceGetRetiredPages", None), h, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    double = ask(getattr(nvml, "nvmlDeviceGetRetiredPages", None), h, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    gpu.retired_pages_single_bit = len(single) if single is not None else None
    gpu.retired_pages_double_bit = len(double) if double is not None else None
    gpu.retired_pages_pending = _enabled(nvml, ask(getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None), h))
    rows = ask(getattr(nvml, "nvmlDeviceGetRemappedRows", None), h)
    if rows is not None:
        gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable = rows[0], rows[1]
        gpu.remapped_rows_pending, gpu.remapped_rows_failure = bool(rows[2]), bool(rows[3])


def _links(gpu: Gpu, nvml: Any, ask: _Asker, h: Any) -> None:
    """The GPU's PCIe link, NVLinks, fabric registration, NUMA node and CPU affinity."""
    gpu.pcie_gen_current = ask(getattr(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", None), h)
    gpu.pcie_gen_max = ask(getattr(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", None), h)
    gpu.pcie_gen_device_max = ask(getattr(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None), h)
    gpu.pcie_width_current = ask(getattr(nvml, "nvmlDeviceGetCurrPcieLinkWidth", None), h)
    gpu.pcie_width_max = ask(getattr(nvml, "nvmlDeviceGetMaxPcieLinkWidth", None), h)
    gpu.nvlinks = _nvlinks(nvml, ask, h)
    (gpu.fabric_state, gpu.fabric_status, gpu.fabric_bandwidth, gpu.fabric_health,
     gpu.fabric_health_flags) = _fabric(nvml, ask, h)
    gpu.numa_node = ask(getattr(nvml, "nvmlDeviceGetNumaNodeId", None), h)
    affinity = ask(getattr(nvml, "nvmlDeviceGetCpuAffinity", None), h, _CPU_SET_WORDS)
    if affinity is not None:
        cpus = [word * 64 + bit for word, mask in enumerate(affinity) for bit in range(64) if mask >> bit & 1]
        gpu.cpu_affinity = compress_cpulist(cpus) if cpus else None


# What is read of each GPU, one group of NVML queries each; a query the GPU or driver lacks leaves its field unknown.
_READERS = (_identity, _modes, _clocks, _power, _thermal, _ecc, _memory_health, _links)


def _read_gpu(nvml: Any, ask: _Asker, index: int, h: Any) -> Gpu:
    gpu = Gpu(index=index)
    for read in _READERS:
        read(gpu, nvml, ask, h)
    return gpu


_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}   # as nvidia-smi -q prints them
_FABRIC_BANDWIDTH = {1: "Degraded", 2: "Full"}    # NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE / _FALSE
# nvml.h's other fields of the health mask (R550+; the last two R570+): (shift, width, the condition each value
# names). 0 is "not supported" in every field; a value not named is a healthy one (FALSE, NONE, CONNECTED).
_FABRIC_FLAGS = (
    (2, 0x3, {1: "route recovery in progress"}),
    (4, 0x3, {1: "route unhealthy"}),
    (6, 0x3, {1: "access timeout recovery"}),
    (8, 0xf, {2: "incorrect configuration: wrong system GUID", 3: "incorrect configuration: wrong chassis serial",
              4: "incorrect configuration: no partition", 5: "incorrect configuration: insufficient NVLinks",
              6: "incorrect configuration: incompatible GPU firmware", 7: "incorrect configuration: invalid location",
              8: "incorrect configuration: GPU state invalid"}),
    (14, 0x3, {2: "global fabric manager disconnected"}),
)
# nvmlGpuFabricInfo_v3_t.healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*), in nvidia-smi -q's words
_FABRIC_SUMMARY = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}


def fabric_health_flags(mask: int) -> Optional[List[str]]:
    """The health mask's conditions that hold; None when the mask supports none of its fields."""
    values = [(names, (mask >> shift) & width) for shift, width, names in _FABRIC_FLAGS]
    if all(value == 0 for _, value in values):
        return None
    return [names[value] for names, value in values if value in names]


def _fabric_info(nvml: Any, ask: "_Asker", h: Any):
    """The newest fabric structure this driver and nvidia-ml-py both know: v3 (health summary), v2 (health mask),
    else the unversioned one; a driver refuses a version it does not know (ARGUMENT_VERSION_MISMATCH). nvidia-ml-py
    hands the structure straight to C, so it goes by reference."""
    import ctypes
    query_v = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    for struct, version in (("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                            ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2")):
        if query_v is None or getattr(nvml, struct, None) is None or getattr(nvml, version, None) is None:
            continue
        info = getattr(nvml, struct)()
        info.version = getattr(nvml, version)
        if ask(query_v, h, ctypes.byref(info), absent=("NVML_ERROR_ARGUMENT_VERSION_MISMATCH",)) is not None:
            return info
    plain, query = getattr(nvml, "c_nvmlGpuFabricInfo_t", None), getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
    if plain is None or query is None:
        return None
    info = plain()
    return info if ask(query, h, ctypes.byref(info)) is not None else None


def _fabric(nvml: Any, ask: "_Asker", h: Any):
    """(state, status, bandwidth, summary, health flags) of the GPU's NVLink fabric registration, as nvidia-smi -q's
    Fabric section words them; Nones where the GPU has no fabric (state 'not supported'). The health mask's
    degraded-bandwidth bits say an NVLink to the switches is down, its other fields that routes are unhealthy or
    recovering, the configuration is wrong or the global fabric manager is gone; the summary (v3) is the driver's
    own verdict over them."""
    info = _fabric_info(nvml, ask, h)
    if info is None or info.state not in _FABRIC_STATES:
        return None, None, None, None, None
    mask = getattr(info, "healthMask", 0)
    bandwidth, flags = _FABRIC_BANDWIDTH.get(mask & 0x3), fabric_health_flags(mask)
    summary = _FABRIC_SUMMARY.get(getattr(info, "healthSummary", 0))
    if info.state != 3:
        return _FABRIC_STATES[info.state], None, bandwidth, summary, flags
    status = "Success" if info.status == 0 else _text(ask(getattr(nvml, "nvmlErrorString", None), info.status))
    return _FABRIC_STATES[info.state], status, bandwidth, summary, flags


def _nvlinks(nvml: Any, ask: _Asker, h: Any) -> Optional[List[NvLink]]:
    links: List[NvLink] = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        state = ask(getattr(nvml, "nvmlDeviceGetNvLinkState", None), h, link, absent=_NO_SUCH)
        if state is None:
            continue
        version = ask(getattr(nvml, "nvmlDeviceGetNvLinkVersion", None), h, link, absent=_NO_SUCH)
        links.append(NvLink(link=link, active=bool(state),
                            version=_NVLINK_VERSIONS.get(version) if version is not None else None))
    return links or None


# nvmlValue_t's member for each nvmlValueType_t a field value may come as (T.Limit margins are negative)
_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_value(nvml: Any, ask: _Asker, h: Any, field_id: int) -> Optional[int]:
    values = ask(getattr(nvml, "nvmlDeviceGetFieldValues", None), h, [field_id])
    if not values or values[0].nvmlReturn != nvml.NVML_SUCCESS:
        return None
    member = _VALUE_MEMBERS.get(values[0].valueType)
    return None if member is None else int(getattr(values[0].value, member))


def _enabled(nvml: Any, value: Optional[int]) -> Optional[bool]:
    return None if value is None else value == nvml.NVML_FEATURE_ENABLED


def _watts(milliwatts: Optional[int]) -> Optional[float]:
    return None if milliwatts is None else milliwatts / 1000.0


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _handle_for(nvml: Any, ask: _Asker, index: int, uuid: Optional[str]):
    """The physical GPU behind `uuid` (or `index`). CUDA names a GPU by its UUID without NVML's prefix, and a MIG
    instance by the instance's UUID: try both prefixes, and read a MIG instance's power, clocks and ECC from the
    GPU it is carved from (NVML answers those only for the whole GPU)."""
    if not uuid:
        return ask(getattr(nvml, "nvmlDeviceGetHandleByIndex", None), index)
    names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else ["GPU-" + uuid, "MIG-" + uuid]
    by_uuid = getattr(nvml, "nvmlDeviceGetHandleByUUID", None)
    h = next((found for found in (ask(by_uuid, name, absent=_NO_SUCH) for name in names) if found is not None), None)
    if h is not None and ask(getattr(nvml, "nvmlDeviceIsMigDeviceHandle", None), h):
        h = ask(getattr(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", None), h)
    return h


def sample(index: int, nvml: Any = None, uuid: Optional[str] = None) -> Optional[dict]:
    """One light reading of GPU `index` (or the GPU with this UUID, which CUDA and NVML agree on when
    their index orders differ; a MIG instance's UUID reads its parent GPU) during a burn-in: clocks,
    temperature, power against its limit, throttle reasons and ECC counters, and `failure` when NVML says
    the GPU itself is gone. None when NVML is unavailable or does not know the GPU."""
    def read(nvml, ask):
        h = _handle_for(nvml, ask, index, uuid)
        if h is None:
            return {"failure": ask.fatal[0]} if ask.fatal else None
        reasons = ask(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None), h)
        if reasons is None:
            reasons = ask(getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None), h)
        pci = ask(getattr(nvml, "nvmlDeviceGetPciInfo", None), h)
        reading = {
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "clock_sm_mhz": ask(getattr(nvml, "nvmlDeviceGetClockInfo", None), h, nvml.NVML_CLOCK_SM),
            "temperature_c": ask(getattr(nvml, "nvmlDeviceGetTemperature", None), h, nvml.NVML_TEMPERATURE_GPU),
            "power_draw_w": _watts(ask(getattr(nvml, "nvmlDeviceGetPowerUsage", None), h)),
            "power_limit_w": _watts(ask(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None), h)),
            "max_sm_clock_mhz": ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, nvml.NVML_CLOCK_SM),
            "clock_event_reasons": None if reasons is None else [n for bit, n in _REASON_BITS if reasons & bit],
            "ecc_volatile_uncorrected": ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h,
                                            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            "ecc_volatile_corrected": ask(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), h,
                                          nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
        }
        if ask.fatal:
            reading["failure"] = ask.fatal[0]
        return reading
    return _in_session(nvml, read)


def job_sample(nvml: Any = None) -> Optional[List[dict]]:
    """One reading of every GPU for `gpuprep watch` (one NVML session): utilisation, SM clock against its maximum,
    power against the enforced limit, memory, PCIe throughput, clock event reasons and the compute processes
    (which PIDs run on it). None when NVML is unavailable; a GPU's field NVML cannot give is None."""
    def read(nvml, ask):
        count = ask(getattr(nvml, "nvmlDeviceGetCount", None)) or 0
        readings = [_job_reading(nvml, ask, index) for index in range(count)]
        for reading, share in zip(readings, _tensor_active(nvml, ask, count)):
            reading["tensor_active_pct"] = share
        return readings
    return _in_session(nvml, read)


GPM_INTERVAL = 0.1      # seconds between the two GPM samples a metric is computed over


def _tensor_active(nvml: Any, ask: "_Asker", count: int) -> List[Optional[float]]:
    """Per GPU, the share of time its SMs ran any Tensor Core instruction (GPM, Hopper and later, R520+), over
    GPM_INTERVAL; None where GPM is not supported. Every supported GPU's first sample is taken before the one wait."""
    import time
    support = getattr(nvml, "c_nvmlGpmSupport_t", None)
    handles = [ask(getattr(nvml, "nvmlDeviceGetHandleByIndex", None), i) for i in range(count)]
    pairs: List[Optional[tuple]] = []
    for h in handles:
        supported = ask(getattr(nvml, "nvmlGpmQueryDeviceSupport", None), h) if h is not None and support else None
        first = ask(getattr(nvml, "nvmlGpmSampleAlloc", None)) if supported and supported.isSupportedDevice else None
        if first is not None and ask(getattr(nvml, "nvmlGpmSampleGet", None), h, first) is None:
            ask(nvml.nvmlGpmSampleFree, first)
            first = None
        pairs.append((h, first) if first is not None else None)
    if not any(pairs):
        return [None] * count
    time.sleep(GPM_INTERVAL)
    return [_tensor_metric(nvml, ask, pair) if pair else None for pair in pairs]


def _tensor_metric(nvml: Any, ask: "_Asker", pair: tuple) -> Optional[float]:
    h, first = pair
    second = ask(getattr(nvml, "nvmlGpmSampleAlloc", None))
    try:
        if second is None or ask(nvml.nvmlGpmSampleGet, h, second) is None:
            return None
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version, get.numMetrics, get.sample1, get.sample2 = nvml.NVML_GPM_METRICS_GET_VERSION, 1, first, second
        get.metrics[0].metricId = nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        if ask(getattr(nvml, "nvmlGpmMetricsGet", None), get) is None or get.metrics[0].nvmlReturn != nvml.NVML_SUCCESS:
            return None
        return round(float(get.metrics[0].value), 1)
    finally:
        for sample in (first, second):
            if sample is not None:
                ask(nvml.nvmlGpmSampleFree, sample)


def accounting(nvml: Any = None) -> Optional[List[dict]]:
    """NVML's per-process accounting of every GPU (one session), for a Slurm job's report: per GPU its `index`,
    `uuid`, `pci_bus_id`, `mode` (accounting on, off, or None where NVML cannot say) and the `processes` it kept,
    running or ended: `pid`, `gpu_util_pct` and `memory_util_pct` over the process's life, `max_memory_bytes`,
    `start_time` (s since the epoch), `seconds` (0 while it runs) and `running`. None when NVML is unavailable."""
    def read(nvml, ask):
        count = ask(getattr(nvml, "nvmlDeviceGetCount", None)) or 0
        return [_accounted(nvml, ask, index) for index in range(count)]
    return _in_session(nvml, read)


_NOT_AVAILABLE = 0xFFFFFFFF       # nvml.h's NVML_VALUE_NOT_AVAILABLE (-1) in an unsigned int


def _accounted(nvml: Any, ask: "_Asker", index: int) -> dict:
    ask.fatal = []
    h = ask(getattr(nvml, "nvmlDeviceGetHandleByIndex", None), index)
    if h is None:
        return {"index": index, "failure": ask.fatal[0] if ask.fatal else "not opened", "mode": None, "processes": []}
    pci = ask(getattr(nvml, "nvmlDeviceGetPciInfo", None), h)
    mode = ask(getattr(nvml, "nvmlDeviceGetAccountingMode", None), h)
    enabled = None if mode is None else mode == nvml.NVML_FEATURE_ENABLED
    processes = []
    for pid in (ask(getattr(nvml, "nvmlDeviceGetAccountingPids", None), h) or []) if enabled else []:
        # a PID the circular buffer has since overwritten is gone, not an error
        stats = ask(getattr(nvml, "nvmlDeviceGetAccountingStats", None), h, pid, absent=("NVML_ERROR_NOT_FOUND",))
        if stats is not None:
            processes.append({
                "pid": pid, "gpu_util_pct": None if stats.gpuUtilization == _NOT_AVAILABLE else stats.gpuUtilization,
                "memory_util_pct": None if stats.memoryUtilization == _NOT_AVAILABLE else stats.memoryUtilization,
                "max_memory_bytes": stats.maxMemoryUsage, "start_time": stats.startTime / 1e6,
                "seconds": stats.time / 1000.0, "running": bool(stats.isRunning)})
    return {"index": index, "uuid": _text(ask(getattr(nvml, "nvmlDeviceGetUUID", None), h)),
            "pci_bus_id": _text(pci.busId) if pci is not None else None, "mode": enabled, "processes": processes,
            "failure": ask.fatal[0] if ask.fatal else None}


def _in_session(nvml: Any, read: Callable[[Any, "_Asker"], Any]):
    """`read(nvml, ask)` inside one NVML session (init, then shutdown whatever happens); None without NVML."""
    nvml = nvml if nvml is not None else load_library()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except (getattr(nvml, "NVMLError", OSError), OSError):
        return None
    try:
        return read(nvml, _Asker(nvml))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _job_reading(nvml: Any, ask: "_Asker", index: int) -> dict:
    ask.fatal = []
    h = ask(getattr(nvml, "nvmlDeviceGetHandleByIndex", None), index)
    if h is None:
        return {"index": index, "failure": ask.fatal[0] if ask.fatal else "not opened"}
    util = ask(getattr(nvml, "nvmlDeviceGetUtilizationRates", None), h)
    memory = ask(getattr(nvml, "nvmlDeviceGetMemoryInfo", None), h)
    reasons = ask(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None), h)
    procs = ask(getattr(nvml, "nvmlDeviceGetComputeRunningProcesses", None), h) or []
    rx = ask(getattr(nvml, "nvmlDeviceGetPcieThroughput", None), h, getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1))
    reading = {
        "index": index, "uuid": _text(ask(getattr(nvml, "nvmlDeviceGetUUID", None), h)),
        "gpu_util_pct": util.gpu if util is not None else None,
        "sm_clock_mhz": ask(getattr(nvml, "nvmlDeviceGetClockInfo", None), h, nvml.NVML_CLOCK_SM),
        "max_sm_clock_mhz": ask(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, nvml.NVML_CLOCK_SM),
        "power_w": _watts(ask(getattr(nvml, "nvmlDeviceGetPowerUsage", None), h)),
        "power_limit_w": _watts(ask(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None), h)),
        "power_default_limit_w": _watts(ask(getattr(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", None), h)),
        "memory_used_mib": memory.used >> 20 if memory is not None else None,
        "memory_total_mib": memory.total >> 20 if memory is not None else None,
        "pcie_rx_mbps": round(rx / 1000, 1) if rx is not None else None,      # NVML: KB/s
        "throttle_reasons": None if reasons is None else [n for bit, n in _REASON_BITS if reasons & bit],
        "pids": sorted(int(p.pid) for p in procs),
    }
    if ask.fatal:
        reading["failure"] = ask.fatal[0]
    return reading
