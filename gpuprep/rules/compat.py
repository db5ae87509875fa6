"""compat.*: will this driver run this CUDA runtime, this cuDNN, this PyTorch wheel on this GPU?

The judging functions take plain versions so `gpuprep compat` (no host) and `gpuprep check`
(a snapshot) reach the same verdicts.
"""
from __future__ import annotations

import re
from typing import List, Optional

from .. import knowledge as kb
from ..knowledge import version_key
from . import Finding, all_gpus, gpu_subject, host, rule

_JIT_NOTE = ("Under minor-version compatibility the runtime starts, but PTX JIT (Triton, torch.compile, "
             "custom kernels built for a newer CUDA) needs the full driver minimum")


def cuda_of_variant(variant: Optional[str]) -> Optional[str]:
    """'cu124' -> '12.4', 'cu118' -> '11.8', 'cu130' -> '13.0'."""
    match = re.fullmatch(r"cu(\d{2,3})", variant or "")
    if not match:
        return None
    digits = match.group(1)
    return f"{digits[:-1]}.{digits[-1]}"


def variant_of_torch(version: Optional[str]) -> Optional[str]:
    match = re.search(r"\+(cu\d+|cpu|rocm[\d.]+)", version or "")
    return match.group(1) if match else None


def judge_driver_for_cuda(finding_id: str, subject: str, what: str, driver: str, cuda: str) -> Finding:
    """Fail below the minor-version-compatibility minimum (or, before CUDA 11, below the toolkit's own
    minimum); warn between that and the toolkit's full minimum; pass from there on."""
    release = kb.cuda_release(cuda)
    evidence = {"driver": driver, "cuda": cuda}
    if release is None:
        return Finding(finding_id, "info", subject, f"{what}: CUDA {cuda} is not in gpuprep's table", evidence,
                       "Check NVIDIA's CUDA release notes for this CUDA version's driver minimum")
    evidence.update(full_minimum=release.toolkit_driver, minor_compat_minimum=release.minor_compat_driver)
    have = version_key(driver)
    full = version_key(release.toolkit_driver)
    remedy = f"Install NVIDIA driver >= {release.toolkit_driver} (CUDA {cuda}'s toolkit driver), or use a build for an older CUDA"
    if have >= full:
        return Finding(finding_id, "pass", subject, f"{what}: driver {driver} supports CUDA {cuda}", evidence,
                       source=release.source)
    if release.minor_compat_driver and have >= version_key(release.minor_compat_driver):
        return Finding(finding_id, "warn", subject,
                       f"{what}: driver {driver} runs CUDA {cuda} only under minor-version compatibility",
                       {**evidence, "note": _JIT_NOTE}, remedy, release.source)
    return Finding(finding_id, "fail", subject, f"{what}: driver {driver} is too old for CUDA {cuda}",
                   evidence, remedy, release.source)


def judge_driver_for_gpu(subject: str, driver: str, cc: str, gpu_name: Optional[str] = None) -> Optional[Finding]:
    """The driver must know the GPU: at least the driver of the first CUDA release that supports its compute
    capability (R550 and a B200: CUDA 12.8's 570.26 is the first), and no branch past the architecture's last
    (Volta after R580). None where the tables know neither."""
    first = kb.first_cuda_for(cc)
    release = kb.cuda_release(first["first_cuda"]) if first else None
    ended = kb.last_branch_for(cc)
    what = f"{gpu_name or 'a GPU'} (compute capability {cc}, {(first or ended or {}).get('architecture', '?')})"
    evidence = {"driver": driver, "compute_capability": cc}
    if ended and version_key(driver)[0] > int(ended["last_driver_branch"]):
        branch = ended["last_driver_branch"]
        return Finding("compat.driver-gpu", "fail", subject,
                       f"Driver {driver} does not support {what}: R{branch} is the last branch for "
                       f"{ended['architecture']}", {**evidence, "last_driver_branch": int(branch)},
                       f"Install a driver of the R{branch} branch (long-term support), or move the job to a newer GPU",
                       ended["source"])
    if release is None:
        return None
    evidence.update(first_cuda=first["first_cuda"], minimum_driver=release.toolkit_driver)
    if version_key(driver) >= version_key(release.toolkit_driver):
        return Finding("compat.driver-gpu", "pass", subject, f"Driver {driver} supports {what}", evidence,
                       source=first["source"])
    return Finding("compat.driver-gpu", "fail", subject,
                   f"Driver {driver} does not support {what}: it needs >= {release.toolkit_driver} (CUDA "
                   f"{first['first_cuda']}, the first release for compute capability {cc})", evidence,
                   f"Install NVIDIA driver >= {release.toolkit_driver} (the {release.toolkit_driver.split('.')[0]} "
                   "branch or newer)", first["source"])


def judge_torch_arch(subject: str, torch_version: str, variant: str, cc: str,
                     arch_list: Optional[List[str]] = None, driver: Optional[str] = None) -> Finding:
    row = kb.torch_arch(torch_version, variant)
    wheel = torch_version if "+" in torch_version else f"{torch_version}+{variant}"
    evidence = {"torch": torch_version, "cuda_variant": variant, "compute_capability": cc}
    if arch_list is None:
        if row is None:
            return Finding("compat.torch-arch", "info", subject,
                           f"PyTorch {wheel} is not in gpuprep's arch table", evidence,
                           "Run `python -c 'import torch; print(torch.cuda.get_arch_list())'` on the host")
        arch_list = row["arch_list"].split(";")
    ptx = [p for p in re.findall(r"compute_(\d+)", row["ptx"] if row else "")]
    evidence["arch_list"] = arch_list
    major, minor = (int(p) for p in cc.split(".")[:2])
    sass = [(int(a[3:-1]), int(a[-1])) for a in arch_list if re.fullmatch(r"sm_\d+", a)]
    source = (row or {}).get("source")
    inferred = (row or {}).get("evidence") == "inferred"
    if any(m == major and n <= minor for m, n in sass):
        return Finding("compat.torch-arch", "pass", subject,
                       f"PyTorch {wheel} has kernels for compute capability {cc}", evidence,
                       source=source)
    if any((int(p[:-1]), int(p[-1])) <= (major, minor) for p in ptx):
        return Finding("compat.torch-arch", "warn", subject,
                       f"PyTorch {wheel} runs on compute capability {cc} only through PTX JIT",
                       {**evidence, "ptx": row["ptx"]}, "Use a wheel built for this GPU (e.g. a newer cu12x/cu13x build)",
                       source)
    return _no_kernels(subject, wheel, variant, cc, evidence, inferred, driver, source)


def _no_kernels(subject: str, wheel: str, variant: str, cc: str, evidence: dict, inferred: bool,
                driver: Optional[str], source: Optional[str]) -> Finding:
    """No kernel and no PTX for the GPU: a fail, a warning where the arch list is only inferred, unless the wheel's
    CUDA predates the GPU (then certain)."""
    certain = _predates(variant, cc)
    severity = "warn" if inferred and not certain else "fail"
    if certain or inferred:
        evidence["note"] = certain or "the arch list for this wheel is inferred, not measured"
    newer = _wheels_supporting(cc, driver)
    remedy = "Install a PyTorch wheel built for this GPU" + (f", e.g. {newer}" if newer else "")
    return Finding("compat.torch-arch", severity, subject, f"PyTorch {wheel} has no kernels for compute capability {cc}",
                   evidence, remedy, source)


def _predates(variant: str, cc: str) -> Optional[str]:
    """Why a wheel cannot hold kernels for `cc`, inferred arch list or not: its CUDA predates the first CUDA that
    builds for it (a cu126 wheel and an RTX 5090). None when it does not."""
    first, built_with = kb.first_cuda_for(cc), cuda_of_variant(variant)
    if not (first and built_with and version_key(built_with) < version_key(first["first_cuda"])):
        return None
    return (f"CUDA {built_with} predates CUDA {first['first_cuda']}, the first to build for compute capability {cc}: "
            "no kernel of this wheel is for it, and it ships no PTX it could JIT")


def _wheels_supporting(cc: str, driver: Optional[str] = None) -> Optional[str]:
    """The newest wheel with kernels for `cc` that this driver also runs in full (never a remedy that compat itself
    fails: a cu130 wheel for a 570 driver)."""
    major, minor = (int(p) for p in cc.split(".")[:2])
    for row in sorted(kb.torch_arch_rows(), key=lambda r: version_key(r["torch"]), reverse=True):
        sass = [(int(a[3:-1]), int(a[-1])) for a in row["arch_list"].split(";") if re.fullmatch(r"sm_\d+", a)]
        if not any(m == major and n <= minor for m, n in sass):
            continue
        cuda = cuda_of_variant(row["cuda_variant"])
        if driver and cuda:
            release = kb.cuda_release(cuda)
            if release is None or version_key(driver) < version_key(release.toolkit_driver):
                continue
        return f"torch {row['torch']}+{row['cuda_variant']}"
    return None


def judge_cudnn(subject: str, cudnn: str, cuda: str, driver: Optional[str]) -> Finding:
    rows = [r for r in kb.cudnn_rows() if r["cudnn_version"] == ".".join(cudnn.split(".")[:3])]
    evidence = {"cudnn": cudnn, "cuda": cuda}
    if not rows:
        return Finding("compat.cudnn-cuda", "info", subject, f"cuDNN {cudnn} is not in gpuprep's table", evidence,
                       "Check NVIDIA's cuDNN support matrix for this release")
    cuda_mm = ".".join(cuda.split(".")[:2])
    fitting = [r for r in rows if cuda_mm in r["cuda_toolkits"].split(";")]
    unread = [r for r in rows if "?" in r["cuda_toolkits"].split(";")
              and f"for CUDA {cuda.split('.')[0]}.x" in r["package"]]
    if not fitting and unread:
        # an unread cell of NVIDIA's table is unknown: never a fail
        return Finding("compat.cudnn-cuda", "info", subject,
                       f"Whether cuDNN {cudnn} supports CUDA {cuda} is not known: that cell of NVIDIA's support "
                       "matrix is not in gpuprep's table", {**evidence, "unknown": "cuda_toolkits"},
                       f"Check NVIDIA's cuDNN {cudnn} support matrix", unread[0]["source"])
    if not fitting:
        majors = sorted({t for r in rows for t in r["cuda_toolkits"].split(";") if t != "?"})
        return Finding("compat.cudnn-cuda", "fail", subject, f"cuDNN {cudnn} is not built for CUDA {cuda}",
                       {**evidence, "supported_cuda": majors},
                       f"Install the cuDNN {cudnn} package for CUDA {cuda.split('.')[0]}.x", rows[0]["source"])
    row = min(fitting, key=lambda r: version_key(r["min_driver_linux"].lstrip(">=")) or (0,))
    minimum = row["min_driver_linux"].lstrip(">=")
    if driver and minimum and minimum[0].isdigit() and version_key(driver) < version_key(minimum):
        return Finding("compat.cudnn-cuda", "fail", subject,
                       f"cuDNN {cudnn} for CUDA {cuda} needs driver >= {minimum}",
                       {**evidence, "driver": driver, "minimum_driver": minimum},
                       f"Install NVIDIA driver >= {minimum}", row["source"])
    return Finding("compat.cudnn-cuda", "pass", subject, f"cuDNN {cudnn} supports CUDA {cuda}", evidence,
                   source=row["source"])


def compute_capability(gpu) -> Optional[str]:
    if gpu.compute_capability:
        return gpu.compute_capability
    model = kb.gpu_model(gpu.name)
    return model["compute_capability"] if model else None


# --- rules over a snapshot ----------------------------------------------------------------------

@rule("compat.torch-driver")
def torch_driver(snap, ctx):
    torch = snap.software.torch
    driver = snap.software.driver_version
    if not torch or not torch.cuda or not driver:
        return []
    return [judge_driver_for_cuda("compat.torch-driver", host(snap), f"PyTorch {torch.version}", driver, torch.cuda)]


@rule("compat.toolkit-driver")
def toolkit_driver(snap, ctx):
    driver = snap.software.driver_version
    if not driver:
        return []
    return [judge_driver_for_cuda("compat.toolkit-driver", tk.path, f"CUDA toolkit {tk.version}", driver, tk.version)
            for tk in snap.software.cuda_toolkits or [] if tk.version]


@rule("compat.cudnn-cuda")
def cudnn_cuda(snap, ctx):
    software = snap.software
    cuda = (software.torch.cuda if software.torch and software.torch.cuda else None) or next(
        (tk.version for tk in software.cuda_toolkits or [] if tk.version), None)
    if not software.cudnn_version or not cuda:
        return []
    return [judge_cudnn(host(snap), software.cudnn_version, cuda, software.driver_version)]


@rule("compat.torch-arch")
def torch_arch(snap, ctx):
    torch = snap.software.torch
    if not torch or not torch.version or not torch.cuda:
        return []
    variant = variant_of_torch(torch.version) or "cu" + torch.cuda.replace(".", "")
    findings = []
    seen = set()
    for gpu in all_gpus(snap):
        cc = compute_capability(gpu)
        if cc is None or cc in seen:
            continue
        seen.add(cc)
        findings.append(judge_torch_arch(gpu_subject(gpu), torch.version, variant, cc, torch.arch_list,
                                         snap.software.driver_version))
    return findings


@rule("compat.torch-cpu-only")
def torch_cpu_only(snap, ctx):
    torch = snap.software.torch
    if not torch or not torch.version or not snap.gpus:
        return []
    if torch.cuda or variant_of_torch(torch.version) not in (None, "cpu"):
        return []
    return [Finding("compat.torch-cpu-only", "fail", host(snap),
                    f"PyTorch {torch.version} is a CPU-only build on a host with {len(snap.gpus)} GPU(s)",
                    {"torch": torch.version, "gpus": len(snap.gpus)},
                    "pip install torch --index-url https://download.pytorch.org/whl/cu126 (pick the CUDA "
                    "variant your driver supports: `gpuprep compat --driver ...`)")]


# CUDA has had majors 1..13; a version outside 1..29 is a typo, not a release gpuprep does not know yet
_CUDA_VERSION = r"([1-9]|[12]\d)\.\d+(\.\d+)?"


def _typed_versions(driver: str, cuda: Optional[str], cudnn: Optional[str], torch: Optional[str]):
    """(torch's variant, the CUDA it was built for) after checking each version typed in; BadInput names the first
    that is not a version."""
    from ..errors import bad_argument
    if not re.fullmatch(r"\d+(\.\d+){0,2}", driver):
        raise bad_argument("driver", f"{driver!r} is not a driver version like 535.104.05 (or a branch like 535)")
    variant = variant_of_torch(torch)
    if torch and variant is None:
        raise bad_argument("torch", f"{torch!r} needs its variant, e.g. 2.5.1+cu124 or 2.5.1+cpu")
    torch_cuda = cuda_of_variant(variant)
    checks = (("cuda", cuda, _CUDA_VERSION, f"{cuda!r} is not a CUDA version like 12.4"),
              ("torch", torch_cuda, _CUDA_VERSION, f"{torch!r}: {variant!r} is not a CUDA variant like cu124"),
              ("cudnn", cudnn, r"\d+(\.\d+){1,3}", f"{cudnn!r} is not a cuDNN version like 9.1.0"))
    for argument, value, pattern, message in checks:
        if value and not re.fullmatch(pattern, value):
            raise bad_argument(argument, message)
    return variant, torch_cuda


def _compute_capability(gpu_name: Optional[str], cc: Optional[str]) -> Optional[str]:
    if gpu_name and not cc:
        cc = resolve_gpu(gpu_name)[0]
    if cc and not re.fullmatch(r"\d+\.\d+", cc):
        from ..errors import bad_argument
        raise bad_argument("cc", f"{cc!r} is not a compute capability like 9.0")
    return cc


_NOT_MODEL = {"nvidia", "geforce", "tesla", "quadro"}


def _tokens(text: str) -> List[str]:
    return [t for t in re.split(r"[\s_-]+", text.lower()) if t and t not in _NOT_MODEL]


def resolve_gpu(text: str):
    """(compute capability, the table rows it stands for) of a GPU as a person names it: nvidia-smi's exact name, or
    a family (`H100`, `A100`, `RTX 5090`, `H100 SXM5`) whose members share one compute capability. A family whose
    members differ is refused with its members; an unknown name with the closest ones."""
    from ..errors import bad_argument
    model = kb.gpu_model(text)
    if model is not None:
        return model["compute_capability"], [model]
    wanted = _tokens(text)
    family = [r for r in kb.gpu_models() if wanted and all(t in _tokens(r["product"]) for t in wanted)]
    ccs = sorted({r["compute_capability"] for r in family})
    if len(ccs) == 1:
        return ccs[0], family
    if family:
        members = "; ".join(f"{r['product']} ({r['compute_capability']})" for r in family)
        raise bad_argument("gpu", lambda name: f"{text!r} names GPUs of different compute capabilities: {members}; "
                                               f"give one of them, or {name('cc')}")
    import difflib
    # a product's name, or one of its words (H100 of "H100 SXM5"), near what was typed
    words = {w: w.upper() for r in kb.gpu_models() for w in _tokens(r["product"]) if re.search(r"\d", w)}
    words.update({r["product"].lower(): r["product"] for r in kb.gpu_models()})
    close = difflib.get_close_matches(" ".join(wanted) or text.lower(), list(words), n=6, cutoff=0.6)
    named = list(dict.fromkeys(words[w] for w in close))[:6]
    hint = f" (close: {', '.join(named)})" if named else ""
    raise bad_argument("gpu", lambda name: f"{text!r} is not in gpuprep's GPU table{hint}; give {name('cc')} instead")


def first_release_of(branch: str) -> str:
    """A driver branch (`535`) as the first release of it that gpuprep's tables know (535.54.03), else BRANCH.0."""
    known = [r.toolkit_driver for r in kb.cuda_releases() if r.toolkit_driver.split(".")[0] == branch]
    return min(known, key=version_key) if known else f"{branch}.0"


def _not_for_nvidia(torch: str, variant: str, driver: str) -> Finding:
    # with a driver given, the question is an NVIDIA GPU's: a CPU or ROCm (AMD) wheel cannot use it
    kind = "CPU-only" if variant == "cpu" else "ROCm (AMD GPU)"
    return Finding("compat.torch-cpu-only", "fail", "combination",
                   f"PyTorch {torch} is a {kind} build: it cannot use NVIDIA driver {driver}'s GPUs",
                   {"torch": torch, "variant": variant}, "Install a CUDA build of PyTorch (+cuXYZ)")


def judge_combination(driver: str, cuda: Optional[str] = None, cudnn: Optional[str] = None,
                      torch: Optional[str] = None, gpu_name: Optional[str] = None,
                      cc: Optional[str] = None) -> List[Finding]:
    """`gpuprep compat`: the same verdicts `check` gives, for versions typed in by hand."""
    from ..errors import BadInput, bad_argument
    variant, torch_cuda = _typed_versions(driver, cuda, cudnn, torch)
    driver, findings = _as_typed(driver, gpu_name, cc)
    if gpu_name and not cc:
        cc = resolve_gpu(gpu_name)[0]
    if cuda:
        findings.append(judge_driver_for_cuda("compat.toolkit-driver", "combination", f"CUDA {cuda}", driver, cuda))
    if torch_cuda:
        findings.append(judge_driver_for_cuda("compat.torch-driver", "combination", f"PyTorch {torch}", driver, torch_cuda))
    if cudnn:
        if not (cuda or torch_cuda):
            raise bad_argument("cudnn", lambda name: f"needs {name('cuda')} or a {name('torch')} with a CUDA variant")
        findings.append(judge_cudnn("combination", cudnn, cuda or torch_cuda, driver))
    cc = _compute_capability(gpu_name, cc)
    if cc:
        for_gpu = judge_driver_for_gpu("combination", driver, cc, gpu_name)
        findings += [for_gpu] if for_gpu else []
    if cc and torch_cuda:
        findings.append(judge_torch_arch("combination", torch, variant, cc, driver=driver))
    if variant == "cpu" or (variant or "").startswith("rocm"):
        findings.append(_not_for_nvidia(torch, variant, driver))
    beyond = judge_table_range("combination", driver) if findings else None
    findings += [beyond] if beyond else []
    if not findings:
        raise BadInput(lambda name: f"nothing to judge: give {name('cuda')}, {name('torch')}, or {name('cudnn')} "
                                    "with the driver")
    from . import SEVERITY_RANK
    return sorted(findings, key=lambda f: SEVERITY_RANK[f.severity])


def _as_typed(driver: str, gpu_name: Optional[str], cc: Optional[str]):
    """(the driver judged, the findings that say how the words typed were taken): a branch (`535`) as its first
    release, a family (`H100`) as its members."""
    findings: List[Finding] = []
    if "." not in driver:
        first = first_release_of(driver)
        findings.append(Finding("compat.table-range", "info", "combination",
                                f"Driver branch R{driver} judged as its first release {first}: later releases of the "
                                "branch may support more", {"branch": driver, "judged_as": first}))
        driver = first
    if gpu_name and not cc and not kb.gpu_model(gpu_name):
        found, rows = resolve_gpu(gpu_name)
        findings.append(Finding("compat.driver-gpu", "info", "combination",
                                f"{gpu_name!r} taken as {', '.join(r['product'] for r in rows)}: every one is "
                                f"compute capability {found}", {"gpu": gpu_name, "compute_capability": found}))
    return driver, findings


def judge_table_range(subject: str, driver: str) -> Optional[Finding]:
    """A driver of a branch newer than every release in gpuprep's tables: its passes stop at what the tables know."""
    newest = kb.newest_known_branch()
    if version_key(driver)[0] <= newest:
        return None
    return Finding("compat.table-range", "info", subject,
                   f"Driver {driver} is newer than gpuprep's tables (they end at the R{newest} branch): what changed "
                   "since is not judged", {"driver": driver, "newest_known_branch": newest},
                   "Check NVIDIA's release notes for this driver, and update gpuprep for newer tables")


@rule("compat.table-range")
def table_range(snap, ctx):
    driver = snap.software.driver_version
    found = judge_table_range(host(snap), driver) if driver and re.fullmatch(r"\d+(\.\d+)*", driver) else None
    return [found] if found else []


@rule("compat.driver-gpu")
def driver_gpu(snap, ctx):
    """Each GPU model the host has, against the driver's branch."""
    driver = snap.software.driver_version
    seen, findings = set(), []
    for gpu in all_gpus(snap) if driver else []:
        cc = compute_capability(gpu)
        if cc and cc not in seen:
            seen.add(cc)
            found = judge_driver_for_gpu(gpu_subject(gpu), driver, cc, gpu.name)
            findings += [found] if found else []
    return findings


@rule("compat.nccl-cuda")
def nccl_cuda(snap, ctx):
    """NCCL wheels are built per CUDA major (nvidia-nccl-cu12, -cu13): one built for another major
    than the PyTorch CUDA runtime beside it cannot be loaded by it."""
    software = snap.software
    torch = software.torch
    if software.nccl_cuda_major is None or not torch or not torch.cuda:
        return []
    runtime_major = int(torch.cuda.split(".")[0])
    evidence = {"nccl": software.nccl_version, "nccl_cuda_major": software.nccl_cuda_major, "torch_cuda": torch.cuda}
    if runtime_major != software.nccl_cuda_major:
        return [Finding("compat.nccl-cuda", "fail", host(snap),
                        f"NCCL {software.nccl_version} is built for CUDA {software.nccl_cuda_major}.x, PyTorch uses CUDA {torch.cuda}",
                        evidence, f"pip install nvidia-nccl-cu{runtime_major} (the wheel matching PyTorch's CUDA major)",
                        "NVIDIA NCCL pip packages (one per CUDA major)")]
    return [Finding("compat.nccl-cuda", "pass", host(snap), f"NCCL {software.nccl_version} matches CUDA {torch.cuda}",
                    evidence)]
