"""tessera run: starts a job through mpirun (or srun inside a Slurm allocation), as horovodrun.

    tessera run -np 4 [-H host1:2,host2:2 | --hostfile FILE] [options] python3 train.py ...

It only composes the launcher's command line: process placement (one slot per rank, no
binding, so each rank's OpenMP threads may use its cores), the user's whole environment
forwarded to every rank as horovodrun forwards it (less the variables that describe this shell
or this host: DENY), Horovod's HOROVOD_* knobs mapped to tessera's (HOROVOD_TO_TESSERA; each
one tessera has no use for is named once), and Horovod's launcher options. It prints the
command, checks that each remote host answers over ssh (the way mpirun reaches it) and then
becomes the launcher process, so Ctrl-C and exit codes are mpirun's.
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys

if not __package__:  # run as a script (the tessera binary's `tessera run`): the package beside
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tessera import supervisor  # noqa: E402

# Not forwarded: what describes this shell, this host or the launcher itself (horovodrun's
# list, env_util.IGNORE_REGEXES, and the same kind of variables). CUDA_VISIBLE_DEVICES
# belongs to each host, as in horovodrun.
DENY = (r"BASH_FUNC_.*", r"OLDPWD", r"PWD", r"_", r"SHLVL", r"HOSTNAME", r"SSH_.*",
        r".*CUDA_VISIBLE_DEVICES", r"OMPI_.*", r"PMIX_.*", r"PRTE_.*", r"HOROVOD_SECRET_KEY")
RUN_AS_ROOT = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
SSH_TIMEOUT_S = 10

# Horovod's knobs and tessera's setting for each, with the conversion of the value.
_LOG_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warning": "warning",
               "error": "error", "fatal": "error"}
HOROVOD_TO_TESSERA = {
    "HOROVOD_FUSION_THRESHOLD": ("TESSERA_FUSION_THRESHOLD", str),  # bytes, as ours
    "HOROVOD_CYCLE_TIME": ("TESSERA_CYCLE_TIME", str),  # milliseconds, as ours
    "HOROVOD_CACHE_CAPACITY": ("TESSERA_CACHE_CAPACITY", str),
    "HOROVOD_TIMELINE": ("TESSERA_TIMELINE", str),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("TESSERA_STALL_CHECK_TIME", str),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("TESSERA_STALL_SHUTDOWN_TIME", str),
    "HOROVOD_AUTOTUNE": ("TESSERA_AUTOTUNE", lambda v: "1" if v.strip() not in ("", "0") else "0"),
    "HOROVOD_AUTOTUNE_LOG": ("TESSERA_AUTOTUNE_LOG", str),
    "HOROVOD_HIERARCHICAL_ALLREDUCE": (
        "TESSERA_ALLREDUCE", lambda v: "hierarchical" if v.strip() not in ("", "0") else ""),
    "HOROVOD_LOG_LEVEL": ("TESSERA_LOG_LEVEL", lambda v: _LOG_LEVELS.get(v.strip().lower(), v)),
}
# HOROVOD_* that need no mapping: the launcher's own or meaning the same thing here already.
HOROVOD_UNDERSTOOD = ("HOROVOD_SECRET_KEY",)

# Options that take a value; flags that take none. "--opt=value" works for the former.
_VALUED = {"-np": "np", "--num-proc": "np", "-p": "np", "-H": "hosts", "--hosts": "hosts",
           "--hostfile": "hostfile", "--launcher": "launcher", "--mpi-args": "mpi_args",
           "--network-interface": "nics", "--output-filename": "output_filename",
           "--timeline-filename": "timeline", "--ssh-port": "ssh_port",
           "--ssh-identity-file": "ssh_identity_file"}
_VALUED.update(supervisor.ELASTIC_VALUED)
_FLAGS = {"--verbose": "verbose", "--autotune": "autotune", "-h": "help", "--help": "help"}
USAGE = ("usage: tessera run -np N [-H host:slots,... | --hostfile FILE] [--launcher "
         "auto|mpirun|srun] [--mpi-args ARGS] [--network-interface IF[,IF]] [--output-filename "
         "DIR] [--timeline-filename FILE] [--autotune] [--ssh-port N] [--ssh-identity-file FILE] "
         "[--verbose] [elastic: --min-np N --max-np N --max-restarts N --host-discovery-script "
         "FILE --slots-per-host N --blacklist-cooldown-range LOW HIGH --elastic-timeout S "
         "--elastic-dir DIR] PROGRAM [ARGS...]")


def parse_args(argv):
    """The launcher's options and the command. An option's value is taken whatever it looks like
    (`--mpi-args "--mca x y"`), and the command starts at the first other word: a word with a
    space is a value or an argument of the program, never taken for the program by itself."""
    opts = {"np": None, "hosts": "", "hostfile": "", "launcher": "auto", "mpi_args": "",
            "nics": "", "output_filename": "", "timeline": "", "ssh_port": "",
            "ssh_identity_file": "", "verbose": False, "autotune": False, "help": False,
            "elastic": {}}
    i = 0
    while i < len(argv):
        word = argv[i]
        key, eq, value = word.partition("=")
        if key in _VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    raise ValueError(f"{word} needs a value; {USAGE}")
                i += 1
                value = argv[i]
            if key in supervisor.ELASTIC_VALUED:
                opts["elastic"][_VALUED[key]] = value
            else:
                opts[_VALUED[key]] = value
        elif word == supervisor.ELASTIC_PAIR:
            if i + 2 >= len(argv):
                raise ValueError(f"{word} needs two values, LOW HIGH (seconds); {USAGE}")
            opts["elastic"]["cooldown"] = (argv[i + 1], argv[i + 2])
            i += 2
        elif word in _FLAGS:
            opts[_FLAGS[word]] = True
        elif word == "--":
            i += 1
            break
        elif word.startswith("-"):
            raise ValueError(f"unknown option {word}; {USAGE}")
        else:
            break
        i += 1
    return opts, argv[i:]


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


def parse_hostfile(text, path="the host file"):
    """Horovod's (and Open MPI's) host file: a line per host, 'host slots=N' or 'host:N' or
    'host' (1 slot); '#' starts a comment."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+?)(?::(\d+)|\s+slots\s*=\s*(\d+))?", line)
        slots = (m.group(2) or m.group(3) or "1") if m else "0"
        if not m or int(slots) < 1:
            raise ValueError(f"{path}, line {number}: '{line}' is not 'host slots=N' (N a "
                             "positive integer), 'host:N' or 'host'")
        hosts.append((m.group(1), int(slots)))
    if not hosts:
        raise ValueError(f"{path} lists no host")
    return hosts


def is_local(host):
    names = {"localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()}
    return host in names


def forwarded(env):
    """Every variable of the environment but the DENY list's, sorted."""
    return sorted(k for k in env if not any(re.fullmatch(r, k) for r in DENY))


def map_horovod_knobs(env):
    """Sets TESSERA_* from HOROVOD_* (a TESSERA_* already set wins) and returns the names of
    the HOROVOD_* that tessera ignores, for one warning."""
    ignored = []
    for key in sorted(k for k in env if k.startswith("HOROVOD_")):
        if key in HOROVOD_TO_TESSERA:
            ours, convert = HOROVOD_TO_TESSERA[key]
            value = convert(env[key])
            if ours not in env and value != "":
                env[ours] = value
        elif key not in HOROVOD_UNDERSTOOD:
            ignored.append(key)
    return ignored


def ssh_args(opts):
    args = []
    if opts["ssh_port"]:
        if not opts["ssh_port"].isdigit():
            raise ValueError(f"--ssh-port must be a port number, got '{opts['ssh_port']}'")
        args += ["-p", opts["ssh_port"]]
    if opts["ssh_identity_file"]:
        args += ["-i", opts["ssh_identity_file"]]
    return args


def mpirun_command(np, hosts, command, env, cpus, opts=None):
    opts = opts or {}
    cmd = ["mpirun", "-np", str(np), "--bind-to", "none", "--map-by", "slot"]
    if hosts:
        cmd += ["-H", ",".join(f"{h}:{s}" for h, s in hosts)]
        if np > sum(s for _, s in hosts):
            raise ValueError(f"-np {np} is more ranks than the {sum(s for _, s in hosts)} "
                             f"slots of the hosts given; give more slots or fewer ranks")
    elif np > cpus:
        cmd.append("--oversubscribe")  # one host, more ranks than cores: allowed, said
    if opts.get("nics"):
        # As horovodrun: MPI's TCP traffic (and its out-of-band channel) and NCCL's sockets.
        cmd += ["--mca", "btl_tcp_if_include", opts["nics"],
                "--mca", "oob_tcp_if_include", opts["nics"]]
    if opts.get("output_filename"):
        cmd += ["--output-filename", opts["output_filename"]]
    ssh = ssh_args(opts) if opts else []
    if ssh:
        cmd += ["--mca", "plm_rsh_args", " ".join(shlex.quote(a) for a in ssh)]
    for key in forwarded(env):
        cmd += ["-x", key]
    cmd += shlex.split(opts.get("mpi_args", ""))
    return cmd + list(command)


def srun_command(np, command, opts=None):
    extra = shlex.split((opts or {}).get("mpi_args", ""))
    return ["srun", "--ntasks", str(np), "--mpi=pmix"] + extra + list(command)


def check_hosts(hosts, ssh=()):
    """Each remote host must answer over ssh without a password (mpirun's way in)."""
    for host, _ in hosts:
        if is_local(host):
            continue
        if shutil.which("ssh") is None:
            raise RuntimeError(f"host {host} is remote but ssh is not installed here")
        try:
            r = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o",
                                f"ConnectTimeout={SSH_TIMEOUT_S}", *ssh, host, "true"],
                               capture_output=True, text=True, timeout=SSH_TIMEOUT_S + 5)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"host {host} did not answer over ssh within "
                               f"{SSH_TIMEOUT_S} s") from None
        if r.returncode != 0:
            raise RuntimeError(f"cannot reach host {host} over ssh: "
                               f"{r.stderr.strip() or 'exit status %d' % r.returncode}")


def _hosts(opts):
    if opts["hosts"] and opts["hostfile"]:
        raise ValueError("give -H or --hostfile, not both")
    if opts["hostfile"]:
        try:
            with open(opts["hostfile"]) as f:
                return parse_hostfile(f.read(), opts["hostfile"])
        except OSError as e:
            raise ValueError(f"--hostfile {opts['hostfile']}: {e.strerror}") from None
    return parse_hosts(opts["hosts"]) if opts["hosts"] else []


def _apply_options(opts, env):
    """The options that are settings of the ranks: set in the environment they inherit."""
    if opts["timeline"]:
        env["TESSERA_TIMELINE"] = opts["timeline"]
    if opts["autotune"]:
        env["TESSERA_AUTOTUNE"] = "1"
    if opts["nics"]:
        env.setdefault("NCCL_SOCKET_IFNAME", opts["nics"])
    if opts["verbose"]:
        env.setdefault("TESSERA_LOG_LEVEL", "info")


def build(argv, env):
    """(the launcher's command, the hosts, the HOROVOD_* ignored); `env` is changed in place to
    what the ranks get."""
    opts, command = parse_args(argv)
    if opts["help"]:
        raise ValueError(USAGE)
    if opts["np"] is None and not opts["elastic"]:
        raise ValueError(f"-np is required; {USAGE}")
    if opts["np"] is not None and (not re.fullmatch(r"-?\d+", opts["np"]) or int(opts["np"]) < 1):
        raise ValueError(f"-np must be at least 1, got {opts['np']}")
    np = int(opts["np"]) if opts["np"] is not None else None
    if not command:
        raise ValueError("no command to run; example: tessera run -np 2 python3 train.py")
    if opts["launcher"] not in ("auto", "mpirun", "srun"):
        raise ValueError(f"--launcher is auto, mpirun or srun, not '{opts['launcher']}'")
    hosts = _hosts(opts)
    ignored = map_horovod_knobs(env)
    _apply_options(opts, env)
    if opts["elastic"]:
        return elastic_job(opts, np, hosts, command), hosts, ignored
    launcher = opts["launcher"]
    if launcher == "auto":
        launcher = "srun" if "SLURM_JOB_ID" in env and not hosts and shutil.which("srun") \
            else "mpirun"
    if launcher == "srun":
        return srun_command(np, command, opts), hosts, ignored
    return mpirun_command(np, hosts, command, env, os.cpu_count() or 1, opts), hosts, ignored


def elastic_job(opts, np, hosts, command):
    """(the checked elastic settings, the command of a generation as a function of its hosts,
    ranks and environment): mpirun's, on the hosts the supervisor picks."""
    settings = supervisor.elastic_settings(opts["elastic"], np)
    if opts["launcher"] == "srun":
        raise ValueError("elastic jobs run through mpirun: srun cannot start ranks on hosts "
                         "outside its allocation; leave out --launcher srun")
    if not hosts and not settings["discovery"]:
        raise ValueError("an elastic job needs its hosts: --host-discovery-script FILE, -H or "
                         "--hostfile")

    def command_for(plan, ranks, env):
        return mpirun_command(ranks, plan, command, env, os.cpu_count() or 1, opts)
    return settings, command_for


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
        cmd, hosts, ignored = build(sys.argv[1:] if argv is None else argv, env)
        opts, _ = parse_args(sys.argv[1:] if argv is None else argv)
        if "OMPI_MCA_plm_rsh_agent" not in env:  # mpirun reaches hosts another way
            check_hosts(hosts, ssh_args(opts))
    except (ValueError, RuntimeError) as e:
        print(f"tessera run: {e}", file=sys.stderr)
        return 2
    if ignored:
        print(f"tessera run: warning: tessera has no equivalent of {', '.join(ignored)}; "
              "ignored (docs/python.md lists the HOROVOD_* knobs it maps)", file=sys.stderr)
    if isinstance(cmd, tuple):
        if shutil.which("mpirun") is None:
            print("tessera run: mpirun is not installed (Debian: openmpi-bin)", file=sys.stderr)
            return 2
        return supervisor.supervise(cmd[0], hosts, cmd[1], env)
    shown = [f"{k}={env[k]}" for k in RUN_AS_ROOT if k in env]
    print("tessera run: " + " ".join(shown + [shlex.quote(c) for c in cmd]), flush=True)
    if shutil.which(cmd[0]) is None:
        print(f"tessera run: {cmd[0]} is not installed (Debian: openmpi-bin)", file=sys.stderr)
        return 2
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    sys.exit(main())
