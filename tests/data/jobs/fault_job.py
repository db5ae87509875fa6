"""A small real data-parallel training job (gloo) for the labelled fault suite (tests/data/jobs/faults.csv): a
DataLoader, forward, backward, the gradients averaged with all_reduce, an optimizer step, and the loss averaged
for the log. Started one task a rank by `srun` (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), or by torchrun.

FAULT picks what goes wrong on rank FAULT_RANK from step FAULT_STEP on; the moment it does is written to
FAULT_LOG (seconds since the epoch), so a bench can time the verdict:
  healthy   nothing
  stop      the rank stops before the loss all_reduce (it sleeps): the others wait there for ever (hung)
  kill      the rank kills itself with SIGKILL (dead)
  desync    the rank calls broadcast where the others call the loss all_reduce (desync)
  slow      the rank does extra work in backward, in a hook on its gradients (straggler)
  data      the rank's DataLoader waits 0.05 s on each sample (0.8 s a batch) (data)
  sigstop   the rank is stopped (SIGSTOP) while it waits inside the loss all_reduce, the others coming 1 s late
            (hung: the process state tells it from the fabric)
STEPS steps (0: until stopped), STEP_SLEEP seconds between steps, so a healthy job takes little CPU.
"""
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

FAULT = os.environ.get("FAULT", "healthy")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "10"))
FAULT_LOG = os.environ.get("FAULT_LOG")
STEPS = int(os.environ.get("STEPS", "0"))
STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))


class Samples(Dataset):
    def __init__(self, starved):
        self.starved = starved
        self.step = 0

    def __len__(self):
        return 1 << 30

    def __getitem__(self, index):
        if self.starved and self.step >= FAULT_STEP:
            time.sleep(0.05)                # a slow disk or object store under one rank
        generator = torch.Generator().manual_seed(index)
        return torch.randn(64, generator=generator), torch.randn(8, generator=generator)


def mark(what):
    if FAULT_LOG:
        with open(FAULT_LOG, "a") as fh:
            fh.write(f"{time.time():.3f} {what}\n")


def main():
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    faulty = rank == FAULT_RANK
    data = Samples(faulty and FAULT == "data")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    if faulty and FAULT == "slow":
        def extra_work(grad):
            if data.step >= FAULT_STEP:
                heavy = torch.randn(256, 256)
                for _ in range(60):
                    heavy = torch.tanh(heavy @ heavy)
            return grad
        model[0].weight.register_hook(extra_work)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = iter(DataLoader(data, batch_size=16, num_workers=0))
    step, times = 0, []
    while STEPS == 0 or step < STEPS:
        began = time.perf_counter()
        data.step = step
        if faulty and step == 0:
            mark("training")
        if faulty and step == FAULT_STEP:
            mark(FAULT)
            if FAULT == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        x, y = next(loader)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(grads)
        offset = 0
        for p in model.parameters():
            p.grad.copy_(grads[offset:offset + p.numel()].view_as(p.grad) / world)
            offset += p.numel()
        optimizer.step()
        if faulty and step >= FAULT_STEP and FAULT == "stop":
            time.sleep(1 << 20)             # stopped: never reaches the loss all_reduce below
        if step == FAULT_STEP and FAULT == "sigstop":
            if faulty:          # stopped half a second into the all_reduce below, where it waits for the others
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGSTOP)).start()
            else:
                time.sleep(1.0)
        if faulty and step == FAULT_STEP and FAULT == "desync":
            dist.broadcast(loss.detach(), src=0)       # the others are in the all_reduce below
        else:
            dist.all_reduce(loss.detach())
        step += 1
        times.append(time.perf_counter() - began)
        time.sleep(STEP_SLEEP)
    if faulty and times:        # the median step past the first quarter (warm), sleep excluded: a watch's overhead
        kept = sorted(times[len(times) // 4:])
        mark(f"step_median_s {kept[len(kept) // 2]:.6f}")
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
