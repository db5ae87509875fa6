"""Issue 46's bed as a bench: RUNS real 4-rank CPU burn-ins (gloo) of ranks alike, beside a CPU hog (two busy loops
on the two cores), each judged by its peers: how many name a slow rank (goal 0 of 20), with each rank's compute step
so the spread the peer rule must tolerate is printed beside it.
Usage: python bench/peers_burnin.py [RUNS]"""
import statistics
import subprocess
import sys
import time


def main(runs: int = 20) -> None:
    from gpuprep.burnin.judge import judge
    from gpuprep.burnin.torchrun import launch
    named, spreads = [], []
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for i in range(runs):
            started = time.monotonic()
            run = launch(15, 4, "gloo")
            steps = {r: statistics.median(v["compute_ms"]) for r, v in sorted(run.ranks.items()) if v.get("compute_ms")}
            middle = statistics.median(steps.values())
            spreads.append(max(abs(v - middle) / middle for v in steps.values()))
            named.append([f.subject for f in judge(run) if f.id == "burnin.slow-gpu" and f.severity == "warn"])
            print(f"run {i + 1}/{runs}: compute ms {', '.join(f'{v:.2f}' for v in steps.values())}; named "
                  f"{named[-1] or 'none'} ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print()
    print("| runs of 4 CPU ranks alike, beside a CPU hog | named a slow rank | widest rank off the median | goal |")
    print("|---|---|---|---|")
    print(f"| {runs} | {sum(1 for n in named if n)} | {100 * max(spreads):.0f}% | 0 named |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
