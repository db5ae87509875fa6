"""A Slurm job's GPU report, written by the epilog (`gpuprep slurm epilog --job-report DIR`): how busy each GPU of
the job was over the job's life, from NVML's per-process accounting (kept after the processes end, while accounting
mode is on), and why, when a `gpuprep watch` of the job (run beside it with `srun --overlap`) left its document in
DIR. Jobstats-style summaries stop at "GPU utilization under 15%, investigate"; this one names the cause when a
watch saw it, and says how to get it when none did.

Pure: accounting readings, the job's start and the watch's document in; a versioned document out. Standard library
only: the node probe's zipapp runs it in the epilog."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from .rules import Finding, worst

SCHEMA = "gpuprep.job-report/1"
WATCH_SCHEMA = "gpuprep.watch/"
START_SLACK = 2.0            # seconds: a process the job started right at its prolog still counts as the job's
_TEXT_LIMIT = 500            # characters of a watch document's text kept (it is a file on the node: untrusted)
_ID = re.compile(r"job\.[a-z][a-z-]{0,40}")
_SEVERITIES = ("fail", "warn", "info")


def busy_limit() -> tuple:
    """(percent, source): under this share of the job's time with a kernel running, a GPU is called under-used."""
    from .knowledge import _rows
    row = next(r for r in _rows("job-thresholds.csv") if r["name"] == "gpu_idle_pct")
    return float(row["value"]), row["source"]


def _weighted(processes: Sequence[dict], key: str, ended_at: float) -> Optional[float]:
    """The processes' `key` (a percentage over each one's life) weighted by how long each ran."""
    pairs = [(p[key], max(p["seconds"] or ended_at - p["start_time"], 0.001)) for p in processes
             if p.get(key) is not None]
    total = sum(weight for _, weight in pairs)
    return round(sum(value * weight for value, weight in pairs) / total, 1) if total else None


def _gpu_summary(gpu: dict, processes: List[dict], ended_at: float) -> dict:
    memory = [p["max_memory_bytes"] for p in processes if p.get("max_memory_bytes") is not None]
    return {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
            "processes": len(processes), "gpu_util_pct": _weighted(processes, "gpu_util_pct", ended_at),
            "memory_util_pct": _weighted(processes, "memory_util_pct", ended_at),
            "max_memory_bytes": max(memory) if memory else None}


def _subject(gpu: dict) -> str:
    return f"GPU{gpu.get('index')}" + (f" ({gpu['pci_bus_id']})" if gpu.get("pci_bus_id") else "")


def _not_judged(subject: str, why: str, remedy: str) -> Finding:
    return Finding("job.not-judged", "info", subject, why, {}, remedy)


_HOW_TO_NAME_IT = ("Name the cause on the next run: `srun --overlap --jobid JOB gpuprep watch --pid PID -o "
                   "DIR/job-JOB.watch.json` beside it (this report then includes what it saw), or `gpuprep diagnose` "
                   "on its PyTorch profiler trace")


def _judged_gpu(gpu: dict, summary: dict, limit: float, source: str, explained: bool) -> Optional[Finding]:
    busy = summary["gpu_util_pct"]
    if summary["processes"] == 0:
        return Finding("job.gpu-idle", "warn", _subject(gpu), "The job was given this GPU and ran nothing on it",
                       {"processes": 0}, "Ask for as many GPUs as the job uses (--gres/--gpus), or make every rank "
                       "take its own GPU (LOCAL_RANK)", source)
    if busy is None or busy >= limit:
        return None
    return Finding("job.gpu-idle", "warn", _subject(gpu),
                   f"Kernels ran {busy:g}% of the time the job's processes held this GPU (under {limit:g}%)",
                   {k: summary[k] for k in ("gpu_util_pct", "memory_util_pct", "max_memory_bytes", "processes")},
                   "See the causes below" if explained else _HOW_TO_NAME_IT, source)


def _job_gpus(gpus: List[dict], allocated: Optional[Sequence[int]]) -> List[dict]:
    return [g for g in gpus if allocated is None or g.get("index") in allocated]


def _accounted(gpu: dict, started_at: float) -> List[dict]:
    return [p for p in gpu.get("processes") or [] if p.get("start_time", 0) >= started_at - START_SLACK]


def watch_findings(document: Any) -> List[Finding]:
    """The causes a `gpuprep watch` of the job found (its job.* findings other than passes), read as untrusted:
    a document that is not a watch report gives none; ids outside job.* and long texts are cut."""
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith(WATCH_SCHEMA):
        return []
    found = []
    for item in document.get("findings") or []:
        if not isinstance(item, dict) or item.get("severity") not in _SEVERITIES:
            continue
        if not isinstance(item.get("id"), str) or not _ID.fullmatch(item["id"]):
            continue
        text = {k: str(item.get(k) or "")[:_TEXT_LIMIT] for k in ("subject", "title", "remedy")}
        found.append(Finding(item["id"], item["severity"], text["subject"], text["title"], {"from": "gpuprep watch"},
                             text["remedy"] or None))
    return found


def job_report(job: str, started_at: Optional[float], ended_at: float, gpus: Optional[List[dict]],
               allocated: Optional[Sequence[int]] = None, watch: Any = None) -> dict:
    """The job's report: per GPU it was given (`allocated`: indexes, None for every GPU) the share of the job's time a
    kernel ran and its peak memory; job.gpu-idle where a GPU was under-used or unused; the watch's causes; and
    job.not-judged, saying why, for what could not be measured (never a silent pass)."""
    limit, source = busy_limit()
    causes = watch_findings(watch)
    findings: List[Finding] = []
    summaries: List[dict] = []
    if gpus is None:
        findings.append(_not_judged("job", "NVML could not be read: no GPU numbers for this job",
                                    "Check the driver on this node (`gpuprep check`)"))
    elif started_at is None:
        findings.append(_not_judged("job", "The prolog left no start time for this job: its processes cannot be "
                                           "told from earlier jobs'", "Run gpuprep as the Prolog too (the "
                                                                        "slurm_health role sets both)"))
    else:
        for gpu in _job_gpus(gpus, allocated):
            if gpu.get("mode") is not True:
                findings.append(_not_judged(_subject(gpu), "NVML accounting mode is off on this GPU: no per-process "
                                            "numbers", "Turn it on once per boot, as root: `nvidia-smi -am 1`" if gpu.get("mode") is False else
                                            "This GPU or driver keeps no per-process accounting"))
                continue
            summary = _gpu_summary(gpu, _accounted(gpu, started_at), ended_at)
            summaries.append(summary)
            judged = _judged_gpu(gpu, summary, limit, source, bool(causes))
            if judged is not None:
                findings.append(judged)
    findings += causes
    if not findings and not summaries:      # no GPU of the job was found to judge: never a clean bill
        findings.append(_not_judged("job", "None of the job's GPUs was found on this node", "Check SLURM_JOB_GPUS "
                                    "against the node's GPUs (`gpuprep check`)"))
    return {"schema": SCHEMA, "job": job, "started_at": started_at, "ended_at": ended_at,
            "verdict": worst(findings) if findings else "pass", "gpus": summaries,
            "findings": [f.to_dict() for f in findings]}


def headline(report: Dict[str, Any]) -> str:
    """One line for the journal: the job, each GPU's busy share, and the first cause."""
    busy = ", ".join(f"GPU{g['index']} {g['gpu_util_pct']:g}%" if g["gpu_util_pct"] is not None
                     else f"GPU{g['index']} ?" for g in report["gpus"])
    first = next((f for f in report["findings"] if f["severity"] != "info"), None) or next(iter(report["findings"]),
                                                                                              None)
    cause = f"; {first['id']} {first['subject']}: {first['title']}" if first else ""
    return f"job {report['job']}: {report['verdict']}" + (f" (kernels ran: {busy})" if busy else "") + cause
