"""A readable host summary and findings report for the terminal. Plain text with ANSI colour
only when the stream is a TTY (rich is not imported: `gpuprep check` must start fast)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Optional

from ..rules import SEVERITY_RANK, Finding
from . import summary
from .sanitize import terminal_line

if TYPE_CHECKING:       # only annotations: the job's reports start faster without the snapshot's dataclasses
    from ..snapshot import Snapshot

_COLOURS = {"fail": "31", "warn": "33", "info": "36", "pass": "32", "head": "1"}


class Writer:
    def __init__(self, colour: bool):
        self.colour = colour
        self.lines: List[str] = []

    def paint(self, text: str, style: str) -> str:
        return f"\033[{_COLOURS[style]}m{text}\033[0m" if self.colour else text

    def line(self, text: str = "") -> None:
        # node-supplied strings reach this line raw: escape their control characters (sanitize.py)
        self.lines.append(terminal_line(text))

    def heading(self, text: str) -> None:
        self.line()
        self.line(self.paint(text, "head"))

    def table(self, header: List[str], rows: Iterable[List[object]]) -> None:
        rows = [["-" if c is None else str(c) for c in row] for row in rows]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        self.line("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for row in rows:
            self.line("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _onoff(value: Optional[bool]) -> Optional[str]:
    return None if value is None else ("on" if value else "off")


_NVML_REASONS = {"not-installed": "not installed (no NVIDIA driver on this host)", "driver-not-loaded": "not loaded",
                 "version-mismatch": "driver/library version mismatch",
                 "no-permission": "NVML: insufficient permissions", "library-not-found": "NVML library not found"}


def _host_section(snap: Snapshot, out: Writer) -> None:
    s = snap.system
    out.line(out.paint(f"gpuprep check: {s.hostname or ', '.join(snap.sources)}", "head"))
    if any([s.os_name, s.kernel, s.cpu_model]):
        out.line(f"  OS {s.os_name or '?'} {s.os_version or ''}  kernel {s.kernel or '?'}")
        out.line(f"  CPU {s.cpu_model or '?'}: {s.sockets or '?'} socket(s), {s.cores or '?'} cores, "
                 f"{s.threads or '?'} threads; memory {s.memory_total_mib or '?'} MiB")


def _torch_text(torch) -> str:
    if torch is None:
        return "not known (not in these facts)"
    if not torch.version:
        return "not installed"
    return torch.version + (f" (CUDA {torch.cuda})" if torch.cuda else " (no CUDA)")


def _software_section(snap: Snapshot, out: Writer) -> None:
    sw = snap.software
    out.heading("Driver and software")
    if snap.nvml.available is False:
        reason = _NVML_REASONS.get(snap.nvml.reason or "", snap.nvml.message or "unavailable")
        out.line("  NVIDIA driver: " + out.paint(reason, "warn"))
    else:
        out.line(f"  driver {sw.driver_version or '?'}  CUDA (driver API) {sw.cuda_driver_version or '?'}")
    toolkits = ", ".join(f"{t.version or '?'} ({t.path})" for t in sw.cuda_toolkits or [])
    out.line(f"  CUDA toolkits: {toolkits or ('not known (not in these facts)' if sw.cuda_toolkits is None else 'none found')}")
    out.line(f"  PyTorch: {_torch_text(sw.torch)}  cuDNN: {sw.cudnn_version or '-'}  NCCL: {sw.nccl_version or '-'}")
    c = snap.container
    if c.docker_reachable:
        out.line(f"  Docker: reachable {c.docker_version or ''}; runtimes {', '.join(c.runtimes or [])} "
                 f"(default {c.default_runtime})")
    elif c.docker_reachable is False:
        out.line("  Docker: not reachable")
    if sw.container_toolkit_version:
        out.line(f"  nvidia-container-toolkit {sw.container_toolkit_version}")


def _power_text(g) -> Optional[str]:
    return f"{g.power_draw_w:.0f}/{g.power_limit_w:.0f}" if g.power_draw_w is not None and g.power_limit_w else None


def _gpu_section(snap: Snapshot, out: Writer) -> None:
    if not snap.gpus:
        return
    out.heading(f"GPUs ({len(snap.gpus)})")
    out.table(["#", "name", "bus id", "mem MiB", "persist", "ECC", "MIG", "PCIe max", "temp C", "power W"],
              [[g.index, g.name, g.pci_bus_id, g.memory_total_mib, _onoff(g.persistence_mode),
                _onoff(g.ecc_mode_current), _onoff(g.mig_mode_current),
                f"Gen{g.pcie_gen_max} x{g.pcie_width_max}" if g.pcie_gen_max else None, g.temperature_c, _power_text(g)]
               for g in snap.gpus])


def _topology_section(snap: Snapshot, out: Writer) -> None:
    topo = snap.topology
    if not (topo and topo.devices):
        return
    out.heading("Topology (nvidia-smi topo -m)")
    devices = topo.devices
    rows = [[d] + [("X" if d == o else topo.matrix.get(d, {}).get(o, "")) for o in devices]
            + [topo.cpu_affinity.get(d, ""), "" if topo.numa_affinity.get(d) is None else topo.numa_affinity[d]]
            for d in devices]
    out.table([""] + devices + ["CPU affinity", "NUMA"], rows)
    for nic, dev in topo.nic_names.items():
        out.line(f"  {nic} = {dev}")


def _manager_line(snap: Snapshot) -> Optional[str]:
    fm = snap.fabric_manager
    if not (fm.state or fm.version or fm.installed is not None):
        return None
    state = fm.state or ("not installed" if fm.installed is False else "?")
    version = fm.version or (fm.mismatch or ["?"])[0]
    switches = "" if fm.nvswitch is None else f"  NVSwitches: {'yes' if fm.nvswitch else 'none'}"
    return f"  Fabric Manager: {state}  version {version}  driver {snap.software.driver_version or '?'}{switches}"


def _imex_line(imex) -> Optional[str]:
    if not imex.installed:
        return None
    nodes = imex.nodes or []
    ready = sum(n.status == "READY" for n in nodes)
    words = [imex.state or imex.query, imex.domain and f"domain {imex.domain}",
             nodes and f"{ready}/{len(nodes)} node(s) READY"]
    return "  IMEX: " + "  ".join(w for w in words if w)


def _fabric_section(snap: Snapshot, out: Writer) -> None:
    """Fabric Manager, each GPU's NVLink fabric registration (nvidia-smi -q's Fabric section or NVML's) and IMEX,
    side by side: a GPU stuck "In Progress" reads at once against a stopped or mismatched Fabric Manager."""
    registered = [g for g in snap.gpus or [] if g.fabric_state or g.fabric_status]
    from ..rules.fabric import nvswitches_in_lspci
    switches = nvswitches_in_lspci(snap)
    lines = [_manager_line(snap), switches and f"  NVSwitches on the PCIe bus (lspci): {switches}"]
    imex = _imex_line(snap.imex)
    if not (any(lines) or registered or imex):
        return
    out.heading("NVLink fabric")
    for line in filter(None, lines):
        out.line(line)
    if registered:
        out.table(["GPU", "bus id", "state", "status", "bandwidth", "health"],
                  [[g.index, g.pci_bus_id, g.fabric_state, g.fabric_status, g.fabric_bandwidth, g.fabric_health]
                   for g in registered])
    if imex:
        out.line(imex)


def _rdma_section(snap: Snapshot, out: Writer) -> None:
    if not snap.rdma_devices:
        return
    out.heading(f"RDMA ports ({len(snap.rdma_devices)})")
    out.table(["device", "port", "netdev", "link layer", "state", "physical", "Gb/s", "part", "firmware", "NUMA"],
              [[p.name, p.port, p.netdev, p.link_layer, p.state, p.phys_state,
                None if p.rate_gbps is None else f"{p.rate_gbps:g}", p.model, p.firmware, p.numa_node]
               for p in snap.rdma_devices])


def _dcgm_section(snap: Snapshot, out: Writer) -> None:
    dcgm = snap.dcgm
    if not (dcgm.tests or dcgm.health):
        return
    out.heading(f"DCGM {dcgm.version or ''}".rstrip())
    if dcgm.tests:
        level = f" -r {dcgm.level}" if dcgm.level else ""
        out.line(f"  dcgmi diag{level}: " + ", ".join(f"{t.name} {t.status}" for t in dcgm.tests))
    if dcgm.health:
        out.line(f"  dcgmi health: {dcgm.health}")


def _numa_section(snap: Snapshot, out: Writer) -> None:
    if snap.numa_nodes:
        out.heading("NUMA")
        out.table(["node", "cpus", "memory MiB"], [[n.node, n.cpulist or "(none)", n.memory_mib] for n in snap.numa_nodes])


def _kernel_log_section(snap: Snapshot, out: Writer) -> None:
    if snap.xids:
        out.heading(f"Kernel log: {len(snap.xids)} Xid/SXid event(s)")
        for e in snap.xids[-10:]:
            out.line(f"  {e.time or '?'}  {e.kind.upper()} {e.code}  PCI {e.pci}  {e.message or ''}"[:160])


# The host summary, in order: each section prints what the snapshot knows, or nothing.
FACT_SECTIONS = (_host_section, _software_section, _gpu_section, _fabric_section, _topology_section, _rdma_section,
                 _numa_section, _dcgm_section, _kernel_log_section)


def render_facts(snap: Snapshot, out: Writer) -> None:
    for section in FACT_SECTIONS:
        section(snap, out)


def _verdict_style(fail: int, warn: int):
    """(word, colour) of a verdict line: FAIL, WARN or OK."""
    return ("FAIL", "fail") if fail else ("WARN", "warn") if warn else ("OK", "pass")


# the headline's word for each JSON verdict: the text says what the document says
_HEADLINE = {"fail": ("FAIL", "fail"), "warn": ("WARN", "warn"), "info": ("INFO", "info"), "pass": ("OK", "pass")}


def _width() -> int:
    """The terminal's width (COLUMNS, else the terminal's own); 0 (no wrapping) when writing to a pipe or file."""
    import shutil
    return shutil.get_terminal_size((0, 0)).columns


def _wrapped(out: Writer, first: str, text: str, indent: int, width: int) -> None:
    """`first` + `text` on lines of at most `width` (the rest indented by `indent`); one line when width is 0."""
    if width <= indent + 20:
        out.line(first + text)
        return
    import textwrap
    lines = textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=" " * indent,
                          break_long_words=True, break_on_hyphens=False) or [first]
    for line in lines:
        out.line(line)


def _words(value) -> str:
    """An evidence value as a person reads it: lists and tables in words, never a Python repr."""
    if isinstance(value, dict):
        return "; ".join(f"{k} {_words(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_words(v) for v in value)
    return str(value)


def _finding_lines(f: Finding, out: Writer) -> None:
    width = _width()
    head = f"  {f.severity.upper().ljust(4)}  "
    _wrapped(out, f"  {out.paint(f.severity.upper().ljust(4), f.severity)}  ",
             f"{f.id}  {f.subject}: {f.title}", len(head), width + len(out.paint("", f.severity)) if width else 0)
    if f.severity in ("fail", "warn") and f.evidence:
        ev = ", ".join(f"{k}={_words(v)}" for k, v in f.evidence.items() if v is not None)
        _wrapped(out, "        evidence: ", ev[:300], 18, width)
    if f.remedy and f.severity != "pass":
        _wrapped(out, "        remedy:   ", f.remedy, 18, width)


def _headline(findings: List[Finding], out: Writer, verdict: Optional[str], unjudged: Optional[List[str]]):
    """The report's last line: the document's verdict in words, and what was not judged; never OK over nothing."""
    unseen = f"; not judged: {'; '.join(unjudged)}" if unjudged else ""
    if not findings:
        return out.paint("NOTHING CHECKED: no check applied to these facts (see --only/--skip, and what the facts "
                         "hold)" + unseen, "warn")
    counts = summary(findings)
    word, style = _HEADLINE[verdict] if verdict else _verdict_style(counts["fail"], counts["warn"])
    tally = f"{counts['fail']} fail, {counts['warn']} warn, {counts['info']} info, {counts['pass']} pass"
    if unjudged and word in ("OK", "INFO"):
        return out.paint(f"NOT JUDGED: {'; '.join(unjudged)}; {tally}", "warn")
    return out.paint(f"{word}: {tally}{unseen}", style)


def render_findings(findings: List[Finding], out: Writer, verbose: bool, waived: Optional[dict] = None,
                    verdict: Optional[str] = None, unjudged: Optional[List[str]] = None) -> None:
    """`waived`: the document's record of what --skip/--only removed ({"summary": counts, "ids": [...]});
    `verdict` and `unjudged`: the document's, so the headline says what its JSON says."""
    shown = [f for f in findings if verbose or f.severity != "pass"]
    areas = sorted({f.area for f in shown},
                   key=lambda a: min(SEVERITY_RANK[f.severity] for f in shown if f.area == a))
    for area in areas:
        out.heading(f"[{area}]")
        for f in (x for x in shown if x.area == area):
            _finding_lines(f, out)
    out.line()
    out.line(_headline(findings, out, verdict, unjudged))
    hidden = (waived or {}).get("summary") or {}
    if hidden.get("fail") or hidden.get("warn"):
        ids = waived["ids"]
        out.line(out.paint(f"waived by --skip/--only: {hidden['fail']} fail, {hidden['warn']} warn ({', '.join(ids)})",
                           "warn"))


def render_facts_only(snap: Snapshot, colour: bool) -> str:
    out = Writer(colour)
    render_facts(snap, out)
    return out.text()


def _finding(data: dict):
    return Finding(**{k: data.get(k) for k in ("id", "severity", "subject", "title", "evidence", "remedy", "source")})


def render_check(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    from ..snapshot import Snapshot
    out = Writer(colour)
    render_facts(Snapshot.from_dict(document["snapshot"]), out)
    if document.get("profile"):
        out.line(f"judged against profile: {document['profile']}")
    render_findings([_finding(f) for f in document["findings"]], out, verbose, document.get("waived"),
                    document.get("verdict"), document.get("not_judged"))
    return out.text()


def _fleet_host_rows(document: dict, out: Writer) -> List[list]:
    rows = []
    for name, entry in sorted(document["hosts"].items()):
        if entry["status"] != "checked":
            rows.append([name, out.paint(entry["status"].upper(), "fail"), "-", "-", "-", "-", "-", entry["problem"]])
            continue
        verdict = entry["verdict"]
        rows.append([name, out.paint(verdict.upper(), verdict), entry["summary"]["fail"], entry["summary"]["warn"],
                     len(entry.get("drift", [])), entry["gpus"], entry["driver"], ""])
    return rows


def _fleet_findings(document: dict, out: Writer, verbose: bool) -> None:
    shown = [g for g in document["findings"] if verbose or g["severity"] in ("fail", "warn")]
    if shown:
        out.heading("Findings by check")
    for group in shown:
        hosts = group["hosts"]
        named = ", ".join(hosts[:8]) + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")
        out.line(f"  {out.paint(group['severity'].upper().ljust(4), group['severity'])}  {group['id']}  "
                 f"{len(hosts)} host(s): {named}")


def _fleet_drift(facts: List[dict], out: Writer, brief: bool) -> None:
    if facts:
        out.heading("Drift between hosts" + (" (--drift shows every group)" if brief else ""))
    for fact in facts:
        reference = f"fleet: {fact['reference']}" if fact["reference"] is not None else "no majority"
        odd = ", ".join(fact["odd_hosts"])
        out.line(f"  {out.paint(fact['severity'].upper().ljust(4), fact['severity'])}  {fact['id']}  "
                 f"{fact['fact']}: " + (f"{odd} ({reference})" if brief else reference))
        for group in [] if brief else fact["groups"]:
            mark = "  " if group["value"] == fact["reference"] else "! "
            out.line(f"        {mark}{group['value']}: {', '.join(group['hosts'])}")


def render_fleet(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    out = Writer(colour)
    s = document["summary"]
    out.line(out.paint(f"gpuprep check: fleet of {s['hosts']} host(s)", "head"))
    out.table(["host", "verdict", "fail", "warn", "drift", "GPUs", "driver", "problem"], _fleet_host_rows(document, out))
    _fleet_findings(document, out, verbose)
    facts = document["drift"]["facts"]
    _fleet_drift(facts, out, brief=not drift_groups)
    out.line()
    verdict = document["verdict"]
    word, style = _verdict_style(verdict == "fail", verdict == "warn")
    out.line(out.paint(f"{word}: {s['hosts_failed']} of {s['hosts']} host(s) failed ({s['hosts_unchecked']} not "
                       f"checked), {len(facts)} drifting fact(s)", style))
    return out.text()


def render_burnin(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    out = Writer(colour)
    for rank in document["ranks"]:
        sweep = rank.get("allreduce", [])
        largest = sweep[-1] if sweep else {}
        out.line(f"  rank {rank['rank']} {rank['host']} {rank['device']}: step {rank['median_step_ms']} ms, "
                 f"compute {rank['median_compute_ms']} ms, all-reduce {largest.get('bytes', 0) >> 20} MiB "
                 f"busbw {largest.get('busbw_gbs', 0):.2f} GB/s, memory {'ok' if rank['memory']['ok'] else 'BAD'}")
    for f in document["findings"]:
        out.line(f"  {out.paint(f['severity'].upper().ljust(4), f['severity'])}  {f['id']}  {f['title']}")
    out.line(f"{document['verdict'].upper()}: burn-in took {document['wall_seconds']:.1f} s")
    return out.text()


def render_plan(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    """The launch plan: a row per local rank, the torchrun line where it binds the same, the wrapper line."""
    from ..parsers.values import compress_cpulist
    out = Writer(colour)
    out.line(f"Launch plan for {document['host']} ({document['mode']}, {len(document['ranks'])} ranks)")
    out.line(f"  {'rank':>4}  {'gpu':>3}  {'bus id':<16}  {'numa':>4}  {'cpus':<22}  {'cores':>5}  {'nic':<10}  "
             f"{'path':<4}  {'omp':>3}  workers")
    for r in document["ranks"]:
        out.line(f"  {r['local_rank']:>4}  {_dash(r['gpu']):>3}  {_dash(r['bus_id']):<16}  {_dash(r['numa_node']):>4}  "
                 f"{compress_cpulist(r['cpus']):<22}  {r['physical_cores']:>5}  {_dash(r['nic']):<10}  "
                 f"{_dash(r['nic_path']):<4}  {r['env']['OMP_NUM_THREADS']:>3}  {r['dataloader_workers']}")
    for note in document["notes"]:
        out.line(f"  note: {note}")
    if document["torchrun"]:
        out.line(f"torchrun alone (same CPU binding; no memory policy, NIC or thread counts): {document['torchrun']}")
    else:
        out.line("torchrun --numa-binding does not give this binding here (a GPU's NUMA node is unknown, "
                 "or not every GPU has a rank)")
    from ..plan import launch_line
    out.line(f"each rank as planned: gpuprep plan --json -o plan.json && {launch_line(len(document['ranks']))}")
    render_findings([_finding(f) for f in document["findings"]], out, True, verdict=document["verdict"])
    return out.text()


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _num(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def render_diagnose(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    """A row per rank (HTA's breakdown, the step, the DataLoader's share, the exposed communication, its first
    cause), then the causes with their gains and fixes."""
    out = Writer(colour)
    out.line(f"Job: {len(document['ranks'])} trace(s)" + (f", joined with node {document['node']}"
                                                          if document.get("node") else
                                                          "; the node's facts not joined (--from node.json or --node "
                                                          "adds its PCIe links, NUMA, throttling, NCCL transport)"))
    causes: Dict[str, str] = {}
    for f in document["findings"]:            # largest gain first: a rank's first cause is its biggest
        if f["severity"] in ("warn", "fail"):
            causes.setdefault(f["subject"], f["id"])
    hosts = any(r.get("host") for r in document["ranks"])       # a host column where a trace's name said one
    out.line(f"  {'rank':<6} " + (f"{'host':<16} " if hosts else "") + f"{'gpu':<22} {'steps':>5} {'step ms':>9} "
             f"{'idle%':>6} {'comp%':>6} {'host-wait%':>10} {'loader%':>7} {'TC%':>5} {'comm ms':>7}  cause")
    for r in document["ranks"]:
        who = "-" if r["rank"] is None else str(r["rank"])
        if hosts:
            who = f"{who:<6} {(r.get('host') or '-')[:16]:<16}"
        subject = f"rank {r['rank']}" if r["rank"] is not None else r["source"].rsplit("/", 1)[-1]
        gpu = r["gpu_name"] or ("no GPU" if not r.get("gpu_kernels") else f"{r.get('vendor') or 'a'} GPU")
        out.line(f"  {who:<6} {gpu[:22]:<22} {r['steps']:>5} {_num(r['step_ms']):>9} "
                 f"{_num(r['idle_pct']):>6} {_num(r['compute_pct']):>6} "
                 f"{_num((r['idle_breakdown_pct'] or {}).get('host_wait')):>10} {_num(r['dataloader_pct']):>7} "
                 f"{_num(r['tensor_core_pct']):>5} {_num((r.get('exposed_ms') or {}).get('comm')):>7}  "
                 f"{causes.get(subject, '-')}")
    render_findings([_finding(f) for f in document["findings"]], out, verbose, verdict=document["verdict"],
                    unjudged=document.get("not_judged"))
    return out.text()


def _median_text(values, suffix="%") -> str:
    import statistics
    known = [v for v in values or [] if v is not None]
    return f"{statistics.median(known):.0f}{suffix}" if known else "-"


def render_watch(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    """A row per rank (medians over the samples, the main thread's most frequent place), then the causes."""
    out = Writer(colour)
    job = document.get("job_id")
    nodes = len(document.get("nodes") or {})
    out.line(f"Watched {len(document['ranks'])} rank(s)" + (f" of job {job} on {nodes} node(s)" if job else "") +
             f" for {document['seconds']} s ({document['samples']} samples)"
             + (f"; the job exited {document['exit_code']}" if document.get("exit_code") is not None else "")
             + (f"; the job is {document['job_state']}" if document.get("job_state") else ""))
    startup = max((r.get("startup_samples") or 0 for r in document["ranks"]), default=0)
    if startup:
        out.line(f"  main-thread shares from the first step on: {startup} start-up sample(s) before it left out")
    width = max([len(r.get("host") or "") for r in document["ranks"]] + [4]) if job else 0
    node = f"{'node':<{width}} " if job else ""
    out.line(f"  {'rank':<6} {node}{'pid':>7} {'gpu util':>8} {'SM clk':>7} {'power':>6} {'mem':>5} {'cpu':>5} "
             f"{'workers':>7}  main thread")
    for r in document["ranks"]:
        out.line(_watch_row(r, width if job else None))
    render_findings([_finding(f) for f in document["findings"]], out, verbose, verdict=document["verdict"],
                    unjudged=document.get("not_judged"))
    return out.text()


def _watch_row(r: dict, width: Optional[int]) -> str:
    """One rank's row: medians over its samples, where its main thread mostly was (and, across nodes, its node
    and where it is now)."""
    shares = r.get("main_thread") or {}
    top = max(shares, key=shares.get) if shares else None
    where = f"{top} {shares[top]:.0f}%" if top else "-"
    host = f"{(r.get('host') or '-'):<{width}} " if width is not None else ""
    return (f"  {'-' if r['rank'] is None else r['rank']!s:<6} {host}{r['pid']:>7} "
            f"{_median_text(r['gpu_util_pct']):>8} {_median_text(r['sm_clock_pct']):>7} "
            f"{_median_text(r['power_pct']):>6} {_median_text(r['memory_pct']):>5} {_median_text(r['cpu_pct']):>5} "
            f"{r['workers']:>7}  {where}{_rank_now(r) if width is not None else ''}")


def _rank_now(rank: dict) -> str:
    """Where a rank of a job across nodes was at the end: ended, its node lost, or its last collective and line."""
    if rank.get("ended"):
        return "; ended"
    if rank.get("node_lost"):
        return "; its node stopped answering"
    collective, site = (rank.get("sites") or [[None, None]])[-1]
    return f"; now {' at '.join(x for x in (collective, site) if x)}" if collective or site else ""


def render_compare(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    """Before and after: each run's step and causes, then what changed."""
    out = Writer(colour)
    for side in ("before", "after"):
        doc = document[side]
        causes = [f"{f['id']} ({f['evidence'].get('gain_pct_of_step', '?')}%)" for f in doc["findings"]
                  if f["severity"] in ("warn", "fail")]
        steps = [r["step_ms"] for r in doc["ranks"] if r.get("step_ms")]
        out.line(f"{side}: {len(doc['ranks'])} trace(s), step {_num(steps[0]) if steps else '-'} ms; "
                 + (", ".join(causes) if causes else "no cause named"))
    render_findings([_finding(f) for f in document["findings"]], out, True, verdict=document["verdict"])
    return out.text()


def render_fleet_report(document: dict, colour: bool, verbose: bool = False, drift_groups: bool = False) -> str:
    out = Writer(colour)
    models = ", ".join(f"{n} {m}" for m, n in sorted(document["models"].items())) or "no GPU"
    out.line(f"Results store {document['store']}: the last {document['days']:g} days; GPUs by model: {models}")
    render_findings([_finding(f) for f in document["findings"]], out, verbose, verdict=document["verdict"])
    return out.text()


def render_document(document: dict, colour: bool = False, verbose: bool = False, drift_groups: bool = False) -> str:
    schema = document["schema"].split("/")[0]
    renderer = {"gpuprep.check": render_check, "gpuprep.fleet": render_fleet,
                "gpuprep.burnin": render_burnin, "gpuprep.plan": render_plan,
                "gpuprep.diagnose": render_diagnose, "gpuprep.watch": render_watch,
                "gpuprep.compare": render_compare, "gpuprep.fleet-report": render_fleet_report}[schema]
    return renderer(document, colour, verbose, drift_groups)
