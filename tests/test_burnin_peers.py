"""Issue 46 on real runs: a CPU burn-in of four gloo ranks alike (one "model": CPU), beside a CPU hog. The ranks share
the host's two cores and rank 0 also serves the rendezvous store, so their compute steps differ by up to ~15%:
none of them may be named slow against its peers (bench/peers_burnin.py repeats the run 20 times)."""
import pytest

from gpuprep.burnin.judge import judge
from gpuprep.burnin.torchrun import launch

pytest.importorskip("torch")


@pytest.mark.slow
def test_four_ranks_alike_beside_a_cpu_hog_name_no_slow_one(cpu_hog):
    run = launch(15, 4, "gloo")
    named = [(f.subject, f.title) for f in judge(run) if f.id == "burnin.slow-gpu" and f.severity == "warn"]
    assert named == [] and sorted(run.ranks) == [0, 1, 2, 3], named
