"""Start (and hold) a local Slurm cluster on 127.0.0.1 for the tests: one munged, one
slurmctld and two slurmd ("n1", "n2", two CPUs each; n2 with two fake GPUs) on this machine.

    python .ci/slurm_cluster.py ROOT &        # writes ROOT/slurm.conf, then ROOT/ready
    export SLURM_CONF=ROOT/slurm.conf         # what sbatch, squeue, scancel read

Kept alive until SIGTERM/SIGINT, when it stops exactly the daemons it started, by the PIDs in
their pid files (slurmd, slurmctld, then munged), and leaves nothing listening. Everything the
cluster has lives under ROOT: its own munge key and socket, state, spool, logs, pid files, and
ports picked free at start, so it never touches a system Slurm or munge, and two of them (the
lead's CI and a test session) can run side by side.

Why each setting:
- every listener on loopback: `SlurmctldHost=<host>(127.0.0.1)`, `NodeAddr=127.0.0.1` and
  `CommunicationParameters=NoCtldInAddrAny,NoInAddrAny` (without them slurmctld listens on
  0.0.0.0); the test suite checks `ss -ltn`;
- `ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`: jobs run as root here, and the
  cgroup plugins would put each job into a Slurm cgroup that fights the local sandbox's own
  cgroups and namespaces; linuxproc tracks a job's processes by parentage, which the sandbox's
  namespaced children keep, so scancel still ends every process of a job;
- `SlurmdParameters=config_overrides`: each node declares two CPUs on a two-core machine
  (four job slots in all), so two workers' jobs fit beside a node's own;
- `SchedulerParameters=batch_sched_delay=0`: Slurm's default lets the scheduling of a batch
  job wait up to 3 s (measured here: 2.7 s from sbatch to the job's start, 0.7 s without),
  which would cost each of the tests' runs that much; a real cluster keeps its own setting;
- `MinJobAge=300` (Slurm's default): a finished job stays visible in squeue for 5 minutes,
  which is how the harness reads how a job ended without Slurm's accounting database;
- two partitions over both nodes: `debug` (default) and `preempt`, whose jobs a job of
  `debug`'s higher priority tier requeues (`PreemptType=preempt/partition_prio`,
  `PreemptMode=REQUEUE`), so preemption can be tested for real; and `gpu`, node n2 alone,
  whose two "GPUs" are device files of /dev/null's kind (gres.conf), so the one-GPU-per-run path is tested too.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

NODES = ("n1", "n2")
CPUS = 2
GPU_NODE, GPUS = "n2", 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_config(root: Path) -> Path:
    host = socket.gethostname()
    ports = {name: free_port() for name in ("ctld", *NODES)}
    munge_socket = root / "munge" / "munge.socket"
    nodes = "\n".join(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 "
                      f"Port={ports[name]} CPUs={CPUS} RealMemory=16384 State=UNKNOWN"
                      + (f" Gres=gpu:{GPUS}" if name == GPU_NODE else "")
                      for name in NODES)
    # The GPU node's "GPUs" are device files that are /dev/null underneath (Slurm wants a
    # character device): it hands one out per --gres=gpu:1 and sets CUDA_VISIBLE_DEVICES from
    # its index, which is all a run's GPU path needs to be tested.
    fake = root / "dev"
    fake.mkdir(exist_ok=True)
    for i in range(GPUS):
        node = fake / f"nvidia{i}"
        if not node.exists():
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "gres.conf").write_text(f"NodeName={GPU_NODE} Name=gpu File={fake}/nvidia[0-{GPUS - 1}]\n")
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=nightshift-ci
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports['ctld']}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
MinJobAge=300
KillWait=5
ReturnToService=2
MpiDefault=none
GresTypes=gpu
{nodes}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=60 State=UP PriorityTier=2
PartitionName=preempt Nodes={','.join(NODES)} MaxTime=60 State=UP PriorityTier=1
PartitionName=gpu Nodes={GPU_NODE} MaxTime=60 State=UP PriorityTier=2
""")
    return conf


def pid_of(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_by_pidfile(path: Path, name: str, wait_s: float = 20.0) -> None:
    pid = pid_of(path)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print(f"{name} (pid {pid}) stopped", flush=True)
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    print(f"{name} (pid {pid}) ignored SIGTERM; killed", flush=True)


def wait_for(check, what: str, wait_s: float = 60.0) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise SystemExit(f"{what} did not happen within {wait_s:.0f} s")


def main(root: Path) -> None:
    for tool in ("munged", "slurmctld", "slurmd", "sinfo"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install slurm-wlm munge")
    for folder in ("munge", "state", "run", "log", *(f"spool/{n}" for n in NODES)):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = write_config(root)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[tuple[Path, str]] = []

    def stop(*_: object) -> None:
        for pidfile, name in reversed(started):
            stop_by_pidfile(pidfile, name)
        (root / "ready").unlink(missing_ok=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    munge_pid = root / "munge" / "munged.pid"
    subprocess.run(["munged", "--force", f"--socket={root}/munge/munge.socket",
                    f"--key-file={key}", f"--pid-file={munge_pid}",
                    f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
                   check=True)   # forks; its pid file says which process it is
    started.append((munge_pid, "munged"))
    subprocess.run(["slurmctld", "-i"], env=env, check=True)   # -i: ignore state a crash left
    started.append((root / "run" / "slurmctld.pid", "slurmctld"))
    wait_for(lambda: pid_of(root / "run" / "slurmctld.pid") is not None, "slurmctld start")
    for name in NODES:
        subprocess.run(["slurmd", "-N", name], env=env, check=True)
        started.append((root / "run" / f"slurmd-{name}.pid", f"slurmd {name}"))

    def idle() -> bool:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True,
                              text=True)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return all(states.get(name) == "idle" for name in NODES)

    try:
        wait_for(idle, "both nodes idle")
    except SystemExit:
        print((root / "log" / "slurmctld.log").read_text()[-3000:], file=sys.stderr)
        stop()
    (root / "ready").write_text(str(conf))
    print(f"slurm cluster up: SLURM_CONF={conf}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python .ci/slurm_cluster.py ROOT")
    main(Path(sys.argv[1]).resolve())
