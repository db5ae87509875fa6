"""A fake NVML for tests, built from a snapshot of a real machine (itself imported from a real
capture). It answers the nvidia-ml-py calls gpuprep's probe makes, with NVML's real error
behaviour: a field the capture says the GPU cannot report raises NVMLError(NOT_SUPPORTED), and
init failures raise the NVML codes the real library returns. Constants and error classes are
nvidia-ml-py's own, so the probe cannot tell the difference."""
from __future__ import annotations

from types import SimpleNamespace

import pynvml

from gpuprep.importers.values import expand_cpulist
from gpuprep.snapshot import Gpu, Snapshot

_ARCH_CODES = {"Kepler": 2, "Maxwell": 3, "Pascal": 4, "Volta": 5, "Turing": 6, "Ampere": 7,
               "Ada Lovelace": 8, "Hopper": 9, "Blackwell": 10}
_MODE_CODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}
_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
_NVLINK_CODES = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}
_INIT_ERRORS = {"driver-not-loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
                "library-not-found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                "version-mismatch": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
                "no-permission": pynvml.NVML_ERROR_NO_PERMISSION}


class FakeNvml:
    def __init__(self, snapshot: Snapshot, lost: tuple = ()):
        self._snap = snapshot
        self._lost = set(lost)         # indices of GPUs that have fallen off the bus
        self._initialised = False
        self.calls = 0

    # every constant and error class comes from the real binding
    def __getattr__(self, name):
        if name.startswith(("NVML_", "NVMLError", "c_nvml")):      # constants, errors, ctypes structures
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- library ------------------------------------------------------------------------
    def nvmlInit(self):
        status = self._snap.nvml
        if status.available is False:
            raise pynvml.NVMLError(_INIT_ERRORS.get(status.reason, pynvml.NVML_ERROR_UNKNOWN))
        self._initialised = True

    def nvmlShutdown(self):
        self._check()
        self._initialised = False

    def _check(self):
        self.calls += 1
        if not self._initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self):
        self._check()
        return self._known(self._snap.software.driver_version)

    def nvmlSystemGetNVMLVersion(self):
        self._check()
        return self._known(self._snap.nvml.library_version)

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._check()
        major, minor = self._known(self._snap.software.cuda_driver_version).split(".")
        return int(major) * 1000 + int(minor) * 10

    nvmlSystemGetCudaDriverVersion = nvmlSystemGetCudaDriverVersion_v2

    def nvmlDeviceGetCount(self):
        self._check()
        return len(self._snap.gpus or [])

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check()
        gpus = self._snap.gpus or []
        if not 0 <= index < len(gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    # --- helpers --------------------------------------------------------------------------
    @staticmethod
    def _known(value):
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _gpu(self, handle) -> Gpu:
        self._check()
        if handle.index in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self._snap.gpus[handle.index]

    def _field(self, handle, name):
        return self._known(getattr(self._gpu(handle), name))

    # --- identity -------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h):
        return self._field(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._field(h, "uuid")

    def nvmlDeviceGetSerial(self, h):
        return self._field(h, "serial")

    def nvmlDeviceGetVbiosVersion(self, h):
        return self._field(h, "vbios_version")

    def nvmlDeviceGetInforomImageVersion(self, h):
        return self._field(h, "inforom_image")

    def nvmlDeviceGetGspFirmwareVersion(self, h):
        return self._field(h, "gsp_firmware")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._field(h, "pci_bus_id").encode())

    def nvmlDeviceGetArchitecture(self, h):
        return _ARCH_CODES[self._field(h, "architecture")]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        major, minor = self._field(h, "compute_capability").split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        mib = self._field(h, "memory_total_mib")
        return SimpleNamespace(total=mib << 20, used=0, free=mib << 20)

    def nvmlDeviceGetPersistenceMode(self, h):
        return pynvml.NVML_FEATURE_ENABLED if self._field(h, "persistence_mode") else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetComputeMode(self, h):
        return _MODE_CODES[self._field(h, "compute_mode")]

    def nvmlDeviceGetMigMode(self, h):
        gpu = self._gpu(h)
        if gpu.mig_mode_current is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu.mig_mode_current), int(bool(gpu.mig_mode_pending))]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        gpu = self._gpu(h)
        if not gpu.mig_mode_current:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7   # an A100/H100 has up to seven MIG slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        if index >= (self._gpu(h).mig_devices or 0):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(parent=h.index, mig=index)

    # --- clocks ---------------------------------------------------------------------------
    _CLOCK_FIELDS = {0: "graphics", 1: "sm", 2: "mem"}

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._field(h, f"clock_{self._CLOCK_FIELDS[kind]}_mhz")

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return self._field(h, f"max_clock_{self._CLOCK_FIELDS[kind]}_mhz")

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        if kind == pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._field(h, f"app_clock_{self._CLOCK_FIELDS[kind]}_mhz")

    def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
        if kind == pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._field(h, f"default_app_clock_{self._CLOCK_FIELDS[kind]}_mhz")

    def nvmlDeviceGetSupportedMemoryClocks(self, h):
        return [pair.mem_mhz for pair in self._field(h, "supported_clocks")]

    def nvmlDeviceGetSupportedGraphicsClocks(self, h, mem):
        for pair in self._field(h, "supported_clocks"):
            if pair.mem_mhz == mem:
                return list(pair.graphics_mhz)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        reasons = self._field(h, "clock_event_reasons")
        return sum(_REASON_BITS[r] for r in reasons)

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    # --- power and temperature --------------------------------------------------------------
    def _milliwatts(self, h, name):
        return int(round(self._field(h, name) * 1000))

    def nvmlDeviceGetPowerUsage(self, h):
        return self._milliwatts(h, "power_draw_w")

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._milliwatts(h, "power_limit_w")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._milliwatts(h, "power_default_limit_w")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._milliwatts(h, "power_enforced_limit_w")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return [self._milliwatts(h, "power_min_limit_w"), self._milliwatts(h, "power_max_limit_w")]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._field(h, "temperature_c")

    def nvmlDeviceGetTemperatureThreshold(self, h, threshold):
        name = {pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temperature_slowdown_c",
                pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temperature_shutdown_c",
                pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "temperature_max_operating_c"}.get(threshold)
        if name is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._field(h, name)

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        gpu = self._gpu(h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for slot, field_id in zip(values, field_ids):
            slot.fieldId = field_id
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP and gpu.memory_temperature_c is not None:
                slot.nvmlReturn = pynvml.NVML_SUCCESS
                slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                slot.value.uiVal = gpu.memory_temperature_c
            else:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    # --- memory health -------------------------------------------------------------------------
    def nvmlDeviceGetEccMode(self, h):
        gpu = self._gpu(h)
        if gpu.ecc_mode_current is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu.ecc_mode_current), int(bool(gpu.ecc_mode_pending))]

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        scope = "volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "aggregate"
        kind = "corrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return self._field(h, f"ecc_{scope}_{kind}")

    def nvmlDeviceGetRetiredPages(self, h, cause):
        name = ("retired_pages_single_bit"
                if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
                else "retired_pages_double_bit")
        return [0x1000 * (i + 1) for i in range(self._field(h, name))]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return pynvml.NVML_FEATURE_ENABLED if self._field(h, "retired_pages_pending") else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, h):
        gpu = self._gpu(h)
        if gpu.remapped_rows_pending is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable,
                int(gpu.remapped_rows_pending), int(bool(gpu.remapped_rows_failure)))

    # --- links ------------------------------------------------------------------------------------
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._field(h, "pcie_gen_current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._field(h, "pcie_gen_max")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._field(h, "pcie_gen_device_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._field(h, "pcie_width_current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._field(h, "pcie_width_max")

    # --- NVLink fabric (NVSwitch systems) ---------------------------------------------------
    _FABRIC_STATES = {"Not Started": 1, "In Progress": 2, "Completed": 3}

    def nvmlDeviceGetGpuFabricInfo(self, h, info):
        gpu = self._gpu(h)
        if gpu.fabric_state not in self._FABRIC_STATES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info.state = self._FABRIC_STATES[gpu.fabric_state]
        info.status = 0 if gpu.fabric_status in (None, "Success") else _ERROR_CODES[gpu.fabric_status]
        return pynvml.NVML_SUCCESS

    def nvmlErrorString(self, code):
        return {v: k for k, v in _ERROR_CODES.items()}.get(code, "Unknown Error")

    def _link(self, h, link):
        for nvlink in self._gpu(h).nvlinks or []:
            if nvlink.link == link:
                return nvlink
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED if not self._gpu(h).nvlinks
                               else pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetNvLinkState(self, h, link):
        return pynvml.NVML_FEATURE_ENABLED if self._link(h, link).active else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return _NVLINK_CODES[self._known(self._link(h, link).version)]

    def nvmlDeviceGetNumaNodeId(self, h):
        return self._field(h, "numa_node")

    def nvmlDeviceGetCpuAffinity(self, h, words):
        cpus = expand_cpulist(self._field(h, "cpu_affinity"))
        masks = [0] * words
        for cpu in cpus:
            masks[cpu // 64] |= 1 << (cpu % 64)
        return masks


# NVML's error strings as nvidia-smi prints them ("Insufficient Resources"), keyed to pynvml's real codes
_ERROR_CODES = {name[len("NVML_ERROR_"):].replace("_", " ").title(): getattr(pynvml, name)
                for name in dir(pynvml) if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)}


def fake_for(snapshot: Snapshot, lost: tuple = ()) -> FakeNvml:
    return FakeNvml(snapshot, lost)


class FakeLostHandles(FakeNvml):
    """NVML on a host where some GPUs cannot even be opened: nvmlDeviceGetHandleByIndex returns
    NVML_ERROR_GPU_IS_LOST for them (what nvidia-smi reports as 'Unable to determine the device handle')."""

    def __init__(self, snapshot: Snapshot, lost_handles: tuple = ()):
        super().__init__(snapshot)
        self._lost_handles = set(lost_handles)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index in self._lost_handles:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return super().nvmlDeviceGetHandleByIndex(index)
