"""Prometheus text exposition of a check, fleet or burn-in document, for node_exporter's textfile
collector (write it with output.write_atomic: temp file beside the target, then rename). Every metric
is prefixed gpuprep_; a host label names the host, so one file can hold a whole fleet."""
from __future__ import annotations

import datetime as _dt
from collections import Counter
from typing import Dict

from ..rules import SEVERITIES


def _timestamp(document: dict) -> float:
    try:
        return _dt.datetime.fromisoformat(document["generated_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return _dt.datetime.now(_dt.timezone.utc).timestamp()


class _Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry
        self.registry = CollectorRegistry()
        self.gauges: Dict[str, object] = {}

    def gauge(self, name: str, help_text: str, labels=()):
        if name not in self.gauges:
            from prometheus_client import Gauge
            self.gauges[name] = Gauge(name, help_text, list(labels), registry=self.registry)
        return self.gauges[name]

    def text(self) -> str:
        from prometheus_client import generate_latest
        return generate_latest(self.registry).decode("utf-8")


def _host(metrics: _Metrics, host: str, entry: dict) -> None:
    checked = entry.get("status", "checked") == "checked"
    metrics.gauge("gpuprep_host_checked", "1 when the host's facts could be gathered and judged, 0 when it was "
                  "unreachable or its probe failed", ["host"]).labels(host).set(1 if checked else 0)
    verdict = metrics.gauge("gpuprep_check_verdict", "1 for the host's verdict (fail, warn, info, pass), 0 for the "
                            "others", ["host", "verdict"])
    for state in SEVERITIES:
        verdict.labels(host, state).set(1 if entry.get("verdict") == state else 0)
    if not checked:
        return
    check = entry["check"]
    counts = Counter((f["id"], f["severity"]) for f in check["findings"])
    findings = metrics.gauge("gpuprep_check_findings", "findings of one check id and severity on the host",
                             ["host", "id", "severity"])
    for (check_id, severity), count in sorted(counts.items()):
        findings.labels(host, check_id, severity).set(count)
    actions = Counter((f["id"], f.get("action") or "none") for f in check["findings"]
                      if f.get("action") not in (None, "none"))
    wanted = metrics.gauge("gpuprep_check_actions", "failing or warning findings of one check id that want this "
                           "repair action on the host (none, reapply, reset-gpu, reboot, drain, ...)",
                           ["host", "id", "action"])
    for (check_id, action), count in sorted(actions.items()):
        wanted.labels(host, check_id, action).set(count)
    gpus = check["snapshot"].get("gpus")
    metrics.gauge("gpuprep_gpu_count", "GPUs the host's driver reports", ["host"]).labels(host).set(len(gpus or []))


def _check(metrics: _Metrics, document: dict) -> None:
    if document["schema"].startswith("gpuprep.fleet/"):
        for host, entry in sorted(document["hosts"].items()):
            _host(metrics, host, entry)
        drift = metrics.gauge("gpuprep_drift_hosts", "hosts whose value of the fact differs from the fleet's",
                              ["id", "severity"])
        for fact in document["drift"]["facts"]:
            drift.labels(fact["id"], fact["severity"]).set(len(fact["odd_hosts"]))
    else:
        _host(metrics, document["host"], {"status": "checked", "verdict": document["verdict"], "check": document})


def _burnin(metrics: _Metrics, document: dict) -> None:
    verdict = metrics.gauge("gpuprep_burnin_verdict", "1 for the burn-in's verdict, 0 for the others", ["verdict"])
    for state in SEVERITIES:
        verdict.labels(state).set(1 if document["verdict"] == state else 0)
    smallest: Dict[int, float] = {}
    for rank in document["ranks"]:
        for point in rank.get("allreduce") or []:
            size, busbw = point.get("bytes"), point.get("busbw_gbs")
            if size is not None and busbw is not None:
                smallest[size] = min(busbw, smallest.get(size, busbw))
    busbw = metrics.gauge("gpuprep_burnin_busbw_gbs", "all-reduce bus bandwidth at this message size, GB/s "
                          "(the slowest rank's: the job runs at its pace)", ["size"])
    for size, value in sorted(smallest.items()):
        busbw.labels(str(size)).set(value)
    step = metrics.gauge("gpuprep_burnin_step_seconds", "median training step time of the rank", ["rank", "host"])
    for rank in document["ranks"]:
        if rank.get("median_step_ms") is not None:
            step.labels(str(rank["rank"]), str(rank.get("host", ""))).set(rank["median_step_ms"] / 1000)
    findings = metrics.gauge("gpuprep_burnin_findings", "burn-in findings of one id and severity",
                             ["id", "severity"])
    for (check_id, severity), count in sorted(Counter((f["id"], f["severity"]) for f in document["findings"]).items()):
        findings.labels(check_id, severity).set(count)


_JOB_GAUGES = (("idle_pct", "share of the GPU span with no kernel running (HTA's definition)"),
               ("compute_pct", "share of the GPU span in compute kernels (HTA)"),
               ("dataloader_pct", "share of step time inside the DataLoader"),
               ("step_ms", "median profiler step, milliseconds"),
               ("tensor_core_pct", "share of GEMM/convolution kernel time on Tensor Cores"))


def _diagnose(metrics: _Metrics, document: dict) -> None:
    for key, text in _JOB_GAUGES:
        gauge = metrics.gauge(f"gpuprep_job_{key}", text, ["rank", "trace"])
        for rank in document["ranks"]:
            if rank.get(key) is not None:
                gauge.labels(str(rank["rank"]), rank["source"].rsplit("/", 1)[-1]).set(rank[key])
    findings = metrics.gauge("gpuprep_job_findings", "job findings of one id and severity", ["id", "severity"])
    for (check_id, severity), count in sorted(Counter((f["id"], f["severity"]) for f in document["findings"]).items()):
        findings.labels(check_id, severity).set(count)


def _watch(metrics: _Metrics, document: dict) -> None:
    import statistics
    for key, text in (("gpu_util_pct", "median NVML GPU utilization over the watch"),
                      ("sm_clock_pct", "median SM clock against its maximum over the watch")):
        gauge = metrics.gauge(f"gpuprep_watch_{key}", text, ["rank", "pid"])
        for rank in document["ranks"]:
            known = [v for v in rank.get(key) or [] if v is not None]
            if known:
                gauge.labels(str(rank["rank"]), str(rank["pid"])).set(statistics.median(known))
    findings = metrics.gauge("gpuprep_job_findings", "job findings of one id and severity", ["id", "severity"])
    for (check_id, severity), count in sorted(Counter((f["id"], f["severity"]) for f in document["findings"]).items()):
        findings.labels(check_id, severity).set(count)


_COMMANDS = {"gpuprep.burnin": ("burnin", _burnin), "gpuprep.diagnose": ("diagnose", _diagnose),
             "gpuprep.watch": ("watch", _watch)}


def render(document: dict) -> str:
    metrics = _Metrics()
    command, build = _COMMANDS.get(document["schema"].split("/")[0], ("check", _check))
    build(metrics, document)
    metrics.gauge("gpuprep_last_run_timestamp_seconds", "when gpuprep produced these numbers (Unix time)",
                  ["command"]).labels(command).set(_timestamp(document))
    return metrics.text()
