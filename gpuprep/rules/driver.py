"""driver.*: can the NVIDIA management library talk to the driver at all, and is the loaded
kernel module the one userspace expects."""
from __future__ import annotations

from . import Finding, host, rule

_NVML_REASONS = {
    "version-mismatch": (
        "fail", "NVIDIA driver/library version mismatch: userspace was upgraded but the old kernel module is loaded",
        "Reboot, or unload and reload the nvidia modules (stop nvidia-persistenced, fabric manager and GPU "
        "processes, then `rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`); pin the driver "
        "afterwards: `gpuprep apply --tags driver_pin`"),
    "no-permission": (
        "fail", "NVML refused access: insufficient permissions",
        "Run as root or give the user access to /dev/nvidia* (inside containers: use the NVIDIA runtime)"),
    "driver-not-loaded": (
        "fail", "The NVIDIA userspace (nvidia-smi, libnvidia-ml) is installed but the driver does not answer: "
                "the kernel module is not loaded or failed to load",
        "Drain the node; check `dmesg` for NVRM errors and `modprobe nvidia` for why it fails (a DKMS build "
        "missing for the running kernel, Secure Boot refusing an unsigned module, nouveau holding the GPUs: "
        "`gpuprep apply --tags system_tuning_nouveau`); reboot. Inside a container: start it with the NVIDIA "
        "runtime (`--gpus all`)"),
    "no-devices": (
        "fail", "The driver answers but sees no GPU",
        "On bare metal: drain, check `lspci -d 10de:` and `dmesg` for RmInitAdapter or fallen-off-the-bus errors, "
        "and the BIOS (Above 4G decoding, Resizable BAR); reseat or RMA. In a VM: the GPU is not passed through. "
        "In a container: it was started without the devices (`--gpus all`, the NVIDIA runtime). In a scheduler "
        "job: the job was given no GPU (request one, e.g. `--gres=gpu:N`)"),
    "not-installed": (
        "info", "No NVIDIA driver on this host",
        "Install the NVIDIA driver if this host should have GPUs"),
    "library-not-found": (
        "fail", "The nvidia kernel module is loaded but libnvidia-ml.so (NVML) is missing",
        "Reinstall the driver's userspace libraries (the package providing libnvidia-ml.so.1)"),
    "error": (
        "fail", "NVML failed to initialise",
        "Check `dmesg` for NVRM errors; inside a container after `systemctl daemon-reload` this is the known "
        "cgroup device reset: restart the container and set the toolkit's cgroup driver correctly"),
}


# each reason's repair action (Finding.action)
_NVML_ACTIONS = {"version-mismatch": "reboot", "no-permission": "fix-config", "driver-not-loaded": "reboot",
                 "no-devices": "drain", "not-installed": "fix-config", "library-not-found": "fix-config",
                 "error": "reboot"}


def nvml_problem(reason) -> str:
    """Why NVML did not answer, in the words of its finding."""
    title = _NVML_REASONS.get(reason or "error", _NVML_REASONS["error"])[1]
    return title[0].lower() + title[1:]


@rule("driver.nvml-unavailable")
def nvml_unavailable(snap, ctx):
    status = snap.nvml
    if status.available is not False:
        return []
    severity, title, remedy = _NVML_REASONS.get(status.reason or "error", _NVML_REASONS["error"])
    if severity == "info" and ctx.require_gpu:
        severity = "fail"
    evidence = {"reason": status.reason, "message": status.message}
    if status.library_version:
        evidence["nvml_library_version"] = status.library_version
    return [Finding("driver.nvml-unavailable", severity, host(snap), title, evidence, remedy,
                    "NVML return codes (nvmlInit); nvidia-smi error messages", _NVML_ACTIONS.get(status.reason))]


@rule("driver.mixed")
def module_mismatch(snap, ctx):
    loaded, userspace = snap.software.kernel_module_version, snap.software.driver_version
    if not loaded or not userspace:
        return []
    if loaded == userspace:
        return [Finding("driver.mixed", "pass", host(snap), "Loaded kernel module matches the driver",
                        {"kernel_module": loaded, "driver": userspace})]
    return [Finding("driver.mixed", "fail", host(snap),
                    "Loaded nvidia kernel module differs from the userspace driver",
                    {"kernel_module": loaded, "driver": userspace},
                    "Reboot (or reload the nvidia modules) so the new driver's module is loaded; then "
                    "`gpuprep apply --tags driver_pin`", "/proc/driver/nvidia/version vs NVML driver version")]
