"""The mission's loop on one host: `gpuprep apply` (nccl_env, system_tuning) converges a systemd container that
looks like a GPU node, then `gpuprep burnin` (gloo, on the container's CPU, from this checkout and venv mounted
read-only) runs on that same host and reads the file apply wrote: every rank must see the values unquoted, exactly
what `gpuprep nccl-env` computes. The container has no network (loopback only)."""
import json
import os
import sys

import pytest

from conftest import REPO, run_cli
from containers import IMAGE, docker, docker_ready, node_exec, prepare, remove_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]
pytest.importorskip("torch")
NAME = f"gpuprep-loop-{os.getpid()}"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    mounts = [f"{path}:{path}:ro" for path in {str(REPO), sys.prefix, sys.base_prefix}
              if path not in ("/usr", "/usr/local", "/")]
    docker("rm", "-f", NAME, check=False)
    docker("run", "-d", "--name", NAME, "--hostname", NAME, "--network", "none", "--cap-add", "SYS_ADMIN",
           "--cap-add", "NET_ADMIN", "--cgroupns=host", "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
           "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", *[a for m in mounts for a in ("-v", m)], IMAGE,
           "/lib/systemd/systemd")
    # the host name resolves to loopback (gloo binds to it): Debian's 127.0.1.1 convention
    node_exec(NAME, "sh", "-c", f"ip addr add 127.0.1.1/32 dev lo && printf '127.0.1.1 {NAME}\\n' >> /etc/hosts",
              check=True)
    inventory = write_inventory(tmp_path_factory.mktemp("loop") / "inventory.yml", [NAME],
                                group_vars={"nccl_env_socket_ifname": "lo"})
    try:
        prepare(inventory)
        yield inventory
    finally:
        remove_nodes([NAME])


def test_an_offline_dry_run_previews_every_role_and_says_what_it_could_not(node, tmp_path):
    """On a node with no network, `apply --check --diff` stopped at container_toolkit's "Fetch the repository
    signing key" (name resolution), so nccl_env and system_tuning were never previewed."""
    done = run_cli("apply", "-i", str(node), "--check", "--diff", "--tags", "container_toolkit,nccl_env,system_tuning",
                   "-e", "container_toolkit_repo_trusted=false", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert 'NCCL_SOCKET_IFNAME="=lo"' in done.stdout                       # nccl_env's file, previewed
    assert "Would fetch the repository signing key" in done.stdout         # what a dry run does not do, said
    assert node_exec(NAME, "test", "-e", "/etc/gpuprep/env").returncode != 0      # and nothing changed


def test_a_node_gpuprep_tuned_passes_gpupreps_burn_in_with_the_values_apply_wrote(node, tmp_path):
    done = run_cli("apply", "-i", str(node), "--tags", "nccl_env,system_tuning", "--json", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    written = node_exec(NAME, "cat", "/etc/gpuprep/env", check=True).stdout
    assert 'NCCL_SOCKET_IFNAME="=lo"' in written
    from gpuprep.common.ncclenv import parse_env_file
    wanted, skipped = parse_env_file(written)
    assert not skipped and wanted["NCCL_SOCKET_IFNAME"] == "=lo"
    burnin = node_exec(NAME, sys.executable, "-m", "gpuprep", "burnin", "--backend", "gloo", "--duration", "8s",
                       "--json", "-o", "/tmp/burnin.json")
    report = json.loads(node_exec(NAME, "cat", "/tmp/burnin.json").stdout or "{}")
    assert burnin.returncode == 0 and report.get("verdict") == "pass", burnin.stdout[-2000:] + burnin.stderr[-2000:]
    for rank in report["ranks"]:
        seen = {k: v for k, v in rank["env"].items() if k in wanted}
        assert seen == wanted, (rank["rank"], seen, wanted)        # unquoted, every variable apply wrote
        assert rank["steps"] > 0
