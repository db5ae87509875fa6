#!/usr/bin/env python3
"""`gpuprep watch --job` over the labelled fault suite (tests/data/jobs/faults.csv), on the real Slurm bed of
tests/test_job_across_nodes.py (three systemd containers on loopback addresses, a real gloo job through srun),
and the merge's cost at scale. Prints, side by side with the goals of issue 45:
  - the share of cases named right (class, rank, node, GPU, and node-or-code);
  - the median and worst time from the fault (the moment the job's faulty rank wrote to its log) to the verdict
    (the moment the watch first saw the problem it ended on);
  - the watched job's step time against the same job unwatched (healthy case, alternating pairs);
  - the CPU the merge and the judgement take for 1,000 nodes x 8 ranks of synthetic streams at one sample a second.
`--merge-only` runs the last alone (no Docker needed)."""
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

PAIRS = 6       # alternating pairs: on 2 shared cores one pair varies by several per cent


def merge_cost(nodes: int = 1000, ranks: int = 8, seconds: int = 20) -> float:
    """CPU seconds a second of stream costs the merger: every node's line of each second fed into Merged, and the
    facts taken and judged as often as watch --job does at that size (slurmjob.judge_every). The nodes' lines are
    made first, as each node's watcher would write them (their cost is the nodes', not the merger's)."""
    from gpuprep.job.facts import JobFacts
    from gpuprep.job.judge import Job, judge
    from gpuprep.job.slurmjob import judge_every
    from gpuprep.job.stream import Emitter, Merged
    from gpuprep.job.watch import RankProcess

    class Node:
        def __init__(self, n):
            self.ranks = [RankProcess(1000 + r, n * ranks + r, r) for r in range(ranks)]
            self.notes, self.lines = [], []
            self.emitter = Emitter(f"node{n:04d}", self)

        def write(self, text):
            self.lines.append(text)

        def flush(self):
            pass

        def sample(self, second):
            for r in self.ranks:        # one sample a rank: what a node's watcher appends each second
                r.stacks.append("compute_launch")
                r.stack_sigs.append(f"{second:012x}")
                r.sites.append(["all_reduce", "train.py:95"])
                r.cpu_seconds.append(second * 0.9)
                r.cpu_pct.append(90.0)
                r.switches.append(second * 40)
                r.cpu_pressure_pct.append(2.5)
                r.gpu_samples.append({"uuid": f"GPU-{r.rank}", "gpu_util_pct": 97, "sm_clock_mhz": 1980,
                                      "max_sm_clock_mhz": 1980, "power_w": 650, "power_limit_w": 700,
                                      "memory_used_mib": 60000, "memory_total_mib": 81559, "throttle_reasons": []})
            self.emitter.sample(self)

    fleet = [Node(n) for n in range(nodes)]
    for second in range(seconds):
        for node in fleet:
            node.sample(second)
    every = judge_every(nodes * ranks, 1.0)
    merged, next_judgement = Merged(), 0.0
    started = time.process_time()
    for second in range(seconds):
        for node in fleet:
            merged.feed(node.lines[second])
        if second >= next_judgement:
            next_judgement += every
            facts = merged.facts(second, 10.0, job_id="1")
            judge(Job(JobFacts([], facts.collectives), None, facts))
    return (time.process_time() - started) / seconds


def suite():
    """Each labelled case once on the bed: (case, named right, seconds from the fault to the verdict)."""
    import test_job_across_nodes as bed
    results = []
    for case in bed.cases():
        node = bed.NODES[int(case["rank"])]
        if case["node_signal"]:
            bed.sh(node, f"sed -i 's/^gpu 0 reasons .*/gpu 0 reasons {case['node_signal']}/' {bed.CONFIG}")
        try:
            job_id = bed.submit(case, bed.free_port())
            bed._wait(lambda: bed.job_state(job_id) == "RUNNING", "the job to run")
            report, _ = bed.watch({"lib": LIB}, job_id, case["until"] or None)
        finally:
            bed.sh(node, f"sed -i 's/^gpu 0 reasons .*/gpu 0 reasons 0x0/' {bed.CONFIG}")
            bed.sh(bed.NODES[0], "scancel --full $(squeue -h -o %i) 2>/dev/null; true", check=False)
        right, seen = bed.judged_right(case, report)
        marks = dict(line.split(" ", 1)[::-1] for line in
                     bed.sh(node, "cat /tmp/fault.log 2>/dev/null", check=False).stdout.split("\n") if " " in line)
        fault_at = float(marks[case["fault"]]) if case["fault"] in marks else None
        delay = seen - fault_at if seen is not None and fault_at is not None else None
        results.append((case["case"], right, delay))
        print(f"  {case['case']:10s} {'right' if right else 'WRONG':5s} "
              f"{f'{delay:5.1f} s from the fault to the verdict' if delay is not None else ''}", flush=True)
    return results


def overhead() -> float:
    """The healthy job's median step, watched over unwatched, in alternating pairs."""
    import test_job_across_nodes as bed
    case = next(c for c in bed.cases() if c["case"] == "healthy")
    ratios = []
    for pair in range(PAIRS):
        steps = {}
        for watched in ((False, True) if pair % 2 == 0 else (True, False)):
            job_id = bed.submit(case, bed.free_port())
            bed._wait(lambda: bed.job_state(job_id) == "RUNNING", "the job to run")
            if watched:
                bed.watch({"lib": LIB}, job_id, None)
            bed._wait(lambda: bed.job_state(job_id) not in ("RUNNING", "PENDING", "COMPLETING"), "the end", 600)
            log = bed.sh(bed.NODES[int(case["rank"])], "cat /tmp/fault.log", check=False).stdout
            steps[watched] = float(log.split("step_median_s ")[1].split()[0])
        ratios.append(steps[True] / steps[False])
    return statistics.median(ratios)


def main():
    cost = merge_cost()
    if "--merge-only" not in sys.argv:
        import nvml_stub
        import test_job_across_nodes as bed
        global LIB
        LIB = str(nvml_stub.build(570))
        with bed.bed():
            print("the labelled fault suite on the Slurm bed (3 nodes, gloo, one rank a node):")
            results = suite()
            ratio = overhead()
        delays = [d for _, right, d in results if d is not None]
        right = sum(1 for _, ok, _ in results if ok)
        print(f"{'':34s} {'measured':>10s}   goal")
        print(f"{'cases named right':34s} {f'{right}/{len(results)}':>10s}   all")
        if delays:
            print(f"{'fault to verdict, median':34s} {statistics.median(delays):9.1f}s   <= 15 s")
            print(f"{'fault to verdict, worst':34s} {max(delays):9.1f}s   <= 30 s")
        print(f"{'step time watched / unwatched':34s} {ratio:10.3f}   <= 1.02")
    print(f"{'merge + judge, 1000 nodes x 8 ranks':34s} {cost:9.2f}c   <= 1 core (CPU s per s of stream)")


if __name__ == "__main__":
    main()
