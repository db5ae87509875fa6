#!/usr/bin/env bash
# Make a Docker engine and the Debian 12 systemd base image available (idempotent).
# Used by .ci/run and by the tests that need real containers.
set -euo pipefail
# bump the tag when the package list changes, so existing machines rebuild
IMAGE="${GPUPREP_BASE_IMAGE:-gpuprep-debian12:v2}"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  (dockerd >/var/log/gpuprep-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/gpuprep-dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  rootfs=$(mktemp -d /var/tmp/gpuprep-rootfs.XXXXXX)
  debootstrap --variant=minbase \
    --include=python3,python3-apt,sudo,systemd,systemd-sysv,openssh-server,procps,kmod,iproute2,ca-certificates,gnupg \
    bookworm "$rootfs" >/var/log/gpuprep-debootstrap.log 2>&1
  tar -C "$rootfs" -c . | docker import -c 'CMD ["/lib/systemd/systemd"]' - "$IMAGE" >/dev/null
  rm -rf "$rootfs"
fi
# Debian's Slurm 22.05 (slurmctld, slurmd, munge) on the base image, for tests/test_slurm.py. Built with the host's
# network: only Debian's mirror is reached, by apt; the containers made from it run with --network none.
SLURM_IMAGE="${GPUPREP_SLURM_IMAGE:-gpuprep-slurm:v1}"
if ! docker image inspect "$SLURM_IMAGE" >/dev/null 2>&1; then
  printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null && rm -rf /var/lib/apt/lists/*\n' "$IMAGE" \
    | docker build --network host -q -t "$SLURM_IMAGE" - >/dev/null
fi
# Debian's own dnf, rpm, versionlock plugin and createrepo_c on the base image, for the RHEL path of the roles
# (tests/test_fabric_role.py): dnf drives a real RPM database and repository there, as on RHEL.
DNF_IMAGE="${GPUPREP_DNF_IMAGE:-gpuprep-dnf:v1}"
if ! docker image inspect "$DNF_IMAGE" >/dev/null 2>&1; then
  printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnf python3-dnf dnf-plugins-core rpm createrepo-c >/dev/null && rm -rf /var/lib/apt/lists/* && mkdir -p /etc/yum.repos.d && sed -i "s/^enabled = true/enabled = false/" /etc/dnf/plugins/local.conf\n' "$IMAGE" \
    | docker build --network host -q -t "$DNF_IMAGE" - >/dev/null
fi
echo "docker ready; base image $IMAGE; Slurm image $SLURM_IMAGE; dnf image $DNF_IMAGE"
