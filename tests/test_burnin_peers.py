"""Issue 46 on real runs: a CPU burn-in of four gloo ranks alike (one "model": CPU), beside a CPU hog. The ranks share
the host's two cores and rank 0 also serves the rendezvous store, so their compute steps differ by up to ~15%:
none of them may be named slow against its peers (bench/peers_burnin.py repeats the run 20 times). And the same run with
one rank held from outside to a fifth of its CPU, as `cpulimit` holds a process: that rank alone is named."""
import pytest

from gpuprep.burnin.judge import judge
from gpuprep.burnin.torchrun import launch

pytest.importorskip("torch")


@pytest.mark.slow
def test_four_ranks_alike_beside_a_cpu_hog_name_no_slow_one(cpu_hog):
    run = launch(15, 4, "gloo")
    named = [(f.subject, f.title) for f in judge(run) if f.id == "burnin.slow-gpu" and f.severity == "warn"]
    assert named == [] and sorted(run.ranks) == [0, 1, 2, 3], named



HELD_MS, RUN_MS = 4, 1          # the held rank runs 1 ms in every 5: a fifth of its share of the CPU


class _Holder:
    """launch()'s progress callback that holds one rank as `cpulimit` does: once the run trains (its first step
    done), the worker of `rank` (found by its RANK variable) is stopped for HELD_MS and let run for RUN_MS, over and
    over, until training ends, so that the busbw and memory phases after it keep their collective timeouts. (A
    cgroup CPU quota cannot hold it: its least quota is 1 ms, more than a CPU rank's compute step needs, and a rank
    that blocked past its quota wakes into a fresh period.)"""

    def __init__(self, rank: int):
        import threading
        self.rank, self.pid, self.stop = rank, None, threading.Event()

    def __call__(self, progress: dict) -> None:
        import threading
        training = progress.get("phase") == "training" and (progress.get("done") or 0) > 0
        if training and self.pid is None:
            self.pid = self._worker()
            if self.pid is not None:
                threading.Thread(target=self._hold, daemon=True).start()
        elif self.pid is not None and progress.get("phase") != "training":
            self.stop.set()

    def _hold(self) -> None:
        import os
        import signal
        try:
            # real-time priority: a holder that waits behind a busy host's other work lets the rank run on
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            while not self.stop.wait(RUN_MS / 1000):
                os.kill(self.pid, signal.SIGSTOP)
                self.stop.wait(HELD_MS / 1000)
                os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _worker(self):
        import psutil
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "gpuprep.burnin.worker" in " ".join(proc.info["cmdline"] or []) and \
                        proc.environ().get("RANK") == str(self.rank):
                    return proc.pid
            except psutil.Error:
                continue
        return None


def _may_run_in_real_time() -> bool:
    import os
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        os.sched_setscheduler(0, before[0], before[1])
        return True
    except (PermissionError, AttributeError):
        return False


@pytest.mark.slow
def test_a_rank_held_to_a_fifth_of_its_cpu_is_named_slow_and_its_peers_are_not(cpu_hog):
    if not _may_run_in_real_time():
        pytest.skip("the holder needs real-time priority (root or CAP_SYS_NICE) to hold a rank on a busy host")
    holder = _Holder(3)
    try:
        run = launch(15, 4, "gloo", on_progress=holder)
    finally:
        holder.stop.set()
    assert holder.pid is not None and run.exit_code == 0, run.log_tail
    slow = [f for f in judge(run) if f.id == "burnin.slow-gpu" and f.severity == "warn"]
    assert [f.subject.split(" (")[0] for f in slow] == ["rank 3"], [(f.subject, f.title) for f in slow]
    assert slow[0].evidence["value"] > 1.5 * slow[0].evidence["peers_median"], slow[0].evidence
