"""tessera run: starts a job through mpirun (or srun inside a Slurm allocation).

    python3 -m tessera.run -np 4 [-H host1:2,host2:2] python3 train.py --epochs 3

It only composes the launcher's command line: process placement (one slot per rank, no
binding, so each rank's OpenMP threads may use its cores), the run-as-root variables where set,
the environment tessera and PyTorch read (TESSERA_*, OMP_*, PYTHONPATH, ...) forwarded to every
rank. It prints the command, checks that each remote host answers over ssh (the way mpirun
reaches it) and then becomes the launcher process, so Ctrl-C and exit codes are mpirun's.
"""
import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys

# Forwarded to every rank when set here (prefixes end with "_").
FORWARD = ("TESSERA_", "OMP_", "MKL_", "OPENBLAS_", "NCCL_", "CUDA_VISIBLE_DEVICES", "PYTHONPATH",
           "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
RUN_AS_ROOT = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
SSH_TIMEOUT_S = 10


def parse_hosts(text):
    """'a:2,b:2' -> [('a', 2), ('b', 2)]; a host without ':slots' has 1 slot."""
    hosts = []
    for item in text.split(","):
        name, _, slots = item.strip().partition(":")
        if not name or (slots and not slots.isdigit()) or slots == "0":
            raise ValueError(f"-H: '{item}' is not host[:slots] (slots a positive integer); "
                             "example: -H node1:4,node2:4")
        hosts.append((name, int(slots) if slots else 1))
    return hosts


def is_local(host):
    names = {"localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()}
    return host in names


def forwarded(env):
    return sorted(k for k in env if k.startswith(FORWARD) or k in FORWARD)


def mpirun_command(np, hosts, command, env, cpus):
    cmd = ["mpirun", "-np", str(np), "--bind-to", "none", "--map-by", "slot"]
    if hosts:
        cmd += ["-H", ",".join(f"{h}:{s}" for h, s in hosts)]
        if np > sum(s for _, s in hosts):
            raise ValueError(f"-np {np} is more ranks than the {sum(s for _, s in hosts)} "
                             f"slots of -H; give more slots or fewer ranks")
    elif np > cpus:
        cmd.append("--oversubscribe")  # one host, more ranks than cores: allowed, said
    for key in forwarded(env):
        cmd += ["-x", key]
    return cmd + list(command)


def srun_command(np, command):
    return ["srun", "--ntasks", str(np), "--mpi=pmix"] + list(command)


def check_hosts(hosts):
    """Each remote host must answer over ssh without a password (mpirun's way in)."""
    for host, _ in hosts:
        if is_local(host):
            continue
        if shutil.which("ssh") is None:
            raise RuntimeError(f"host {host} is remote but ssh is not installed here")
        try:
            r = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o",
                                f"ConnectTimeout={SSH_TIMEOUT_S}", host, "true"],
                               capture_output=True, text=True, timeout=SSH_TIMEOUT_S + 5)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"host {host} did not answer over ssh within "
                               f"{SSH_TIMEOUT_S} s") from None
        if r.returncode != 0:
            raise RuntimeError(f"cannot reach host {host} over ssh: "
                               f"{r.stderr.strip() or 'exit status %d' % r.returncode}")


def build(argv, env):
    p = argparse.ArgumentParser(prog="tessera run", description=__doc__.split("\n\n")[0])
    p.add_argument("-np", "--num-proc", type=int, required=True, dest="np",
                   help="number of ranks")
    p.add_argument("-H", "--hosts", default="", help="host:slots,... (default: this host)")
    p.add_argument("--launcher", choices=["auto", "mpirun", "srun"], default="auto",
                   help="auto: srun inside a Slurm allocation without -H, else mpirun")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    a = p.parse_args(argv)
    if a.np < 1:
        raise ValueError(f"-np must be at least 1, got {a.np}")
    if not a.command:
        raise ValueError("no command to run; example: tessera run -np 2 python3 train.py")
    hosts = parse_hosts(a.hosts) if a.hosts else []
    launcher = a.launcher
    if launcher == "auto":
        launcher = "srun" if "SLURM_JOB_ID" in env and not hosts and shutil.which("srun") \
            else "mpirun"
    if launcher == "srun":
        return srun_command(a.np, a.command), hosts
    return mpirun_command(a.np, hosts, a.command, env, os.cpu_count() or 1), hosts


def with_package_path(env):
    """The ranks import the same tessera as this launcher: its folder goes first on their
    PYTHONPATH (the build tree's python/ or site-packages)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = root + (os.pathsep + rest if rest else "")
    return env


def main(argv=None):
    env = with_package_path(dict(os.environ))
    try:
        cmd, hosts = build(sys.argv[1:] if argv is None else argv, env)
        check_hosts(hosts)
    except (ValueError, RuntimeError) as e:
        print(f"tessera run: {e}", file=sys.stderr)
        return 2
    shown = [f"{k}={env[k]}" for k in RUN_AS_ROOT if k in env]
    print("tessera run: " + " ".join(shown + [shlex.quote(c) for c in cmd]), flush=True)
    if shutil.which(cmd[0]) is None:
        print(f"tessera run: {cmd[0]} is not installed (Debian: openmpi-bin)", file=sys.stderr)
        return 2
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    sys.exit(main())
