"""Every id `gpuprep check` can report (docs/checks.md documents each; tests/test_docs.py keeps the three
in step). --skip and --only accept these and their areas, nothing else."""

CHECK_IDS = frozenset({
    "compat.cudnn-cuda", "compat.nccl-cuda", "compat.toolkit-driver", "compat.torch-arch", "compat.torch-cpu-only",
    "compat.torch-driver", "container.docker-missing", "container.gpu-smoke", "container.nccl-limits", "container.nvidia-runtime-missing", "container.toolkit-old",
    "driver.mixed", "driver.not-probed", "driver.nvml-unavailable", "env.cuda-visible-devices", "env.nccl-ib-disabled",
    "env.nccl-socket-ifname", "env.omp-threads", "gpu.app-clocks-below-max", "gpu.capture-incomplete", "gpu.clock-throttle",
    "gpu.compute-mode", "gpu.count", "gpu.ecc-disabled", "gpu.ecc-uncorrectable", "gpu.fabric", "gpu.init-failed", "gpu.mig-enabled",
    "gpu.mixed-models", "gpu.pcie-degraded", "gpu.pcie-width", "gpu.reset-required", "gpu.sensor-unreadable", "gpu.persistence-off", "gpu.retired-pages", "gpu.row-remap", "gpu.sxid",
    "gpu.temperature", "gpu.unreachable", "gpu.xid", "numa.cores-per-gpu", "numa.gpu-balance", "numa.host-size", "numa.memory-per-gpu",
    "sys.cpu-governor", "sys.iommu", "sys.memlock", "sys.nouveau-loaded", "sys.numa-balancing", "sys.pcie-aer",
    "sys.peermem-missing", "sys.shm-size", "sys.ssh-password-auth", "sys.ssh-root-login", "sys.thp", "topo.gpu-nic-affinity", "topo.nvlink-inactive",
    "topo.p2p-path", "topo.pcie-acs", "topo.rdma-nics",
    # fleet drift (rules/drift.py FACTS): a host whose fact differs from the fleet's
    "drift.app-clocks", "drift.container-toolkit", "drift.cpu-cores", "drift.cpu-model", "drift.cuda-driver",
    "drift.cuda-toolkit", "drift.cudnn", "drift.docker-runtimes", "drift.driver", "drift.ecc-mode", "drift.gpu-count",
    "drift.gpu-model", "drift.gsp-firmware", "drift.inforom", "drift.kernel", "drift.kernel-cmdline", "drift.memory",
    "drift.mig-mode", "drift.nccl", "drift.nccl-env", "drift.numa", "drift.nvlink", "drift.omp-env", "drift.os",
    "drift.pcie-link", "drift.persistence", "drift.power-limit", "drift.system-tuning", "drift.torch",
    "drift.vbios",
})
AREAS = frozenset(i.split(".", 1)[0] for i in CHECK_IDS)
