# Built by tools/build_collection.py from gpuprep/common/container_smoke.py, gpuprep's one copy: edit that file, not this one.
"""Can a container see the GPUs, and what shared memory and locked memory does it get? Shared by
`gpuprep check --deep` (container.gpu-smoke, container.nccl-limits) and the container_toolkit role's smoke test.

The image: no registry is needed. A tiny image is imported from the host's own /bin/sh and the libraries `ldd`
names for it; the NVIDIA runtime injects nvidia-smi and the driver's libraries into any container it starts
(its hooks mount them and run the host's ldconfig in the container), so the image needs only a loader, libc, a
shell and the directories the hooks write to. It is tagged by the digest of its content and built once.

Limits of what runs here: two `docker run --rm` of a ~1 MB image, each bounded by a timeout; no GPU memory is
allocated (`nvidia-smi -L` only lists devices). Standard library only."""
import hashlib
import io
import os
import re
import subprocess
import tarfile

IMAGE_REPO = "gpuprep/gpu-smoke"
TIMEOUT = 120
# the directories the NVIDIA runtime's hooks mount into and the ones a process expects
IMAGE_DIRS = ("etc", "tmp", "dev", "proc", "sys", "run", "usr/bin", "usr/lib", "usr/lib64", "usr/lib/x86_64-linux-gnu",
              "usr/lib/aarch64-linux-gnu", "var/run")
# NCCL's guidance for containers: `--shm-size=1g --ulimit memlock=-1` (NCCL user guide, "Docker" section)
NCCL_SHM_BYTES = 1 << 30
SHM_SIZE = re.compile(r"\bsize=(\d+)([kmg]?)\b")
GPU_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
LIMITS_SCRIPT = ("ulimit -l; while read -r line; do case \"$line\" in *' /dev/shm '*) echo \"$line\";; esac; "
                 "done < /proc/self/mountinfo")


def parse_ldd(text):
    """The files `ldd` resolved: `name => /path (addr)` and a bare `/path (addr)` (the loader)."""
    files = []
    for line in text.splitlines():
        target = line.split("=>", 1)[1] if "=>" in line else line
        path = target.strip().split(" (", 1)[0].strip()
        if path.startswith("/"):
            files.append(path)
    return files


def parse_gpu_list(text):
    """`nvidia-smi -L`: [(index, name, uuid)] of the GPU lines (MIG devices, indented below them, not counted)."""
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in map(GPU_LINE.match, text.splitlines()) if m]


def parse_limits(text):
    """What LIMITS_SCRIPT printed: `ulimit -l` (KiB, or None for unlimited) and /dev/shm's size in bytes (None
    when there is no /dev/shm mount or it has no size, i.e. unbounded)."""
    lines = text.strip().splitlines()
    memlock = None if not lines or lines[0].strip() == "unlimited" else int(lines[0].strip())
    shm = None
    for line in lines[1:]:
        match = SHM_SIZE.search(line.split(" - ", 1)[-1])
        if match:
            shm = int(match.group(1)) * UNITS[match.group(2)]
    return {"memlock_kib": memlock, "shm_bytes": shm, "shm_mounted": len(lines) > 1}


def _run(argv, stdin=None, timeout=TIMEOUT):
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"argv": argv, "rc": None, "stdout": "", "stderr": "timed out after %ds" % timeout}
    except OSError as exc:
        return {"argv": argv, "rc": None, "stdout": "", "stderr": str(exc)}
    return {"argv": argv, "rc": done.returncode, "stdout": done.stdout.decode(errors="replace")[-20000:],
            "stderr": done.stderr.decode(errors="replace")[-4000:]}


def image_tar(shell="/bin/sh"):
    """The image's root filesystem as tar bytes: the host's shell and what ldd says it loads."""
    ldd = _run(["ldd", shell], timeout=30)
    files = [(shell, "bin/sh")] + [(path, path.lstrip("/")) for path in parse_ldd(ldd["stdout"])]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("bin",) + IMAGE_DIRS:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for source, name in files:
            with open(os.path.realpath(source), "rb") as fh:
                data = fh.read()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def ensure_image(docker):
    """The local smoke image's tag, imported from the host's files unless it exists.
    Returns (tag, imported, error): `imported` says this call added it (and should remove it afterwards)."""
    data = image_tar()
    tag = "%s:%s" % (IMAGE_REPO, hashlib.sha256(data).hexdigest()[:12])
    if _run([docker, "image", "inspect", tag], timeout=60)["rc"] == 0:
        return tag, False, None
    done = _run([docker, "import", "-", tag], stdin=data)
    if done["rc"] != 0:
        return None, False, "docker import: " + done["stderr"].strip()[-300:]
    return tag, True, None


def gpu_run_argv(docker, image, how):
    """`docker run` of nvidia-smi -L with every GPU: Docker's --gpus (toolkit 1.x with Docker 19.03+) or the
    registered nvidia runtime with NVIDIA_VISIBLE_DEVICES (older setups, or where --gpus is not wired)."""
    access = ["--gpus", "all"] if how == "gpus" else ["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"]
    return [docker, "run", "--rm", "--network", "none", "--pull", "never", *access,
            "-e", "NVIDIA_DRIVER_CAPABILITIES=utility", image, "nvidia-smi", "-L"]


def smoke(docker="docker", image=None, runtimes=(), with_gpus=True):
    """Run the GPU smoke test (unless with_gpus is false) and the limits probe; return raw results (judged by
    judge_smoke/judge_limits)."""
    imported = False
    if image is None:
        image, imported, error = ensure_image(docker)
        if image is None:
            return {"image": None, "error": error, "gpu": None, "limits": None}
    gpu = _run(gpu_run_argv(docker, image, "gpus")) if with_gpus else None
    if gpu and gpu["rc"] != 0 and "nvidia" in runtimes:
        gpu = _run(gpu_run_argv(docker, image, "runtime"))
    limits = _run([docker, "run", "--rm", "--network", "none", "--pull", "never", image, "/bin/sh", "-c",
                   LIMITS_SCRIPT])
    if imported:                        # leave the host as it was: the image is rebuilt in a second next time
        _run([docker, "rmi", image], timeout=60)
    return {"image": image, "error": None, "gpu": gpu, "limits": limits}


def judge_smoke(gpu, host_gpus):
    """(ok, message) for a smoke run given the host's GPU count."""
    if gpu is None:
        return False, "the smoke test did not run"
    listed = parse_gpu_list(gpu["stdout"]) if gpu["rc"] == 0 else []
    if gpu["rc"] != 0:
        said = [line for line in (gpu["stderr"] + gpu["stdout"]).splitlines() if line.strip()
                and not line.startswith("Run 'docker run --help'")]
        return False, "a GPU container failed: %s" % (said[0][:300] if said else "exit %s" % gpu["rc"])
    if len(listed) != host_gpus:
        return False, "a GPU container sees %d GPU(s), the host has %d" % (len(listed), host_gpus)
    return True, "a GPU container sees all %d GPU(s)" % host_gpus


def judge_limits(limits):
    """The shortfalls of a default container against NCCL's needs: [] when none."""
    short = []
    if limits["shm_mounted"] and limits["shm_bytes"] is not None and limits["shm_bytes"] < NCCL_SHM_BYTES:
        short.append("/dev/shm is %d MiB (NCCL: 1 GiB or more, --shm-size=1g)" % (limits["shm_bytes"] >> 20))
    if limits["memlock_kib"] is not None:
        short.append("locked memory is limited to %d KiB (NCCL/RDMA: unlimited, --ulimit memlock=-1)"
                     % limits["memlock_kib"])
    return short
