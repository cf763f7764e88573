"""tessera run's supervisor for elastic jobs (docs/reliability.md, "Elastic training").

    tessera run --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh python3 train.py

mpirun (or Slurm) still starts the ranks; this process starts mpirun once per *generation*: on
the hosts discovered (Horovod's contract: the script prints `host:slots` lines, or `host` with
--slots-per-host slots), with at least --min-np and at most --max-np ranks, hosts in the order
they were first seen so that rank 0 stays on the oldest one. A generation ends in one of three
ways:
  - every rank finished: the job is done;
  - rank 0 left the restart marker (runtime/elastic.h) after the ranks learnt at a commit that
    discovery shows more slots: the next generation runs on the larger set;
  - ranks were lost (the liveness monitor's ending): the failure records the ranks left name
    the lost ranks and their hosts (mpirun's own report when there is none); those hosts go
    into cool-down (--blacklist-cooldown-range, Horovod's rule; without it, for good), and the
    next generation runs on what is left, or the supervisor stops with a line that says why:
    fewer than --min-np slots for --elastic-timeout seconds, or --max-restarts used up.
The ranks find the folder shared with this process in TESSERA_ELASTIC_DIR and the generation
in TESSERA_ELASTIC_GENERATION; tessera.torch.elastic and `tessera train --elastic` restore the
last snapshot from it. mpirun runs in a session of its own that this process ends (TERM, then
KILL) when it is stopped, and it is told to end (PR_SET_PDEATHSIG) should this process be
killed outright: no rank outlives the supervisor.
"""
import ctypes
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

# Horovod's bounds for --blacklist-cooldown-range (runner/elastic/discovery.py).
COOLDOWN_LIMITS_S = (1, 3600)
DISCOVERY_INTERVAL_S = 1.0  # how often discovery runs while a generation runs (Horovod's: 1 s)
DISCOVERY_TIMEOUT_S = 30  # one run of the script
ELASTIC_TIMEOUT_S = 600  # Horovod's --elastic-timeout: the longest wait for --min-np slots
STOP_GRACE_S = 10  # mpirun gets this long after TERM before KILL
EXIT_STOPPED = 3  # the supervisor gave up (below --min-np, --max-restarts); its line says why
MPIRUN_LOST = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")

# tessera run's elastic options (Horovod's names, and --elastic-dir) and their keys.
ELASTIC_VALUED = {"--min-np": "min_np", "--max-np": "max_np", "--max-restarts": "max_restarts",
                  "--host-discovery-script": "discovery", "--slots-per-host": "slots_per_host",
                  "--elastic-timeout": "elastic_timeout", "--elastic-dir": "elastic_dir"}
ELASTIC_PAIR = "--blacklist-cooldown-range"  # LOW HIGH


_START = time.monotonic()


def say(text):
    """A line of the supervisor's, with the seconds since it started (to read recoveries by)."""
    print(f"tessera run [{time.monotonic() - _START:7.1f} s]: {text}", file=sys.stderr,
          flush=True)


# ---- pure planning (tests/python/test_supervisor.py) --------------------------------------

def parse_discovery(text, slots_per_host):
    """The script's output: one host per line, `host:slots` or `host` (slots_per_host slots);
    blank lines and '#' comments are skipped. A host listed twice keeps its last line."""
    hosts = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, colon, slots = line.partition(":")
        if not name or " " in line or (colon and not slots.isdigit()) or slots == "0":
            raise ValueError(f"line {number}: '{line}' is not host:slots (slots a positive "
                             "integer) or host")
        hosts.pop(name, None)
        hosts[name] = int(slots) if colon else slots_per_host
    return list(hosts.items())


def cooldown_s(times_failed, lo, hi, u):
    """Horovod's cool-down after a host's `times_failed`-th failure: lo * 2**times_failed plus
    u * lo (u uniform in [0, 1)), within [lo, hi]."""
    return max(lo, min(hi, lo * (1 << min(times_failed, 40)) + u * lo))


class HostBook:
    """Hosts in the order first seen, and the ones failed: in cool-down until a time, or for
    good when there is no cool-down range."""

    def __init__(self, cooldown=None, uniform=random.random):
        self.order = []
        self.failed = {}  # host -> (times failed, end of cool-down; math.inf: for good)
        self.cooldown = cooldown
        self.uniform = uniform

    def see(self, hosts):
        for name, _ in hosts:
            if name not in self.order:
                self.order.append(name)

    def fail(self, host, now):
        times, _ = self.failed.get(host, (0, 0))
        times += 1
        until = math.inf
        if self.cooldown:
            until = now + cooldown_s(times, *self.cooldown, self.uniform())
        self.failed[host] = (times, until)
        return until - now

    def cooling(self, now):
        """{host: seconds left} of the hosts still set aside."""
        return {h: until - now for h, (_, until) in self.failed.items() if until > now}

    def usable(self, hosts, now):
        """The discovered hosts out of cool-down, oldest first."""
        self.see(hosts)
        slots = dict(hosts)
        cooling = self.cooling(now)
        return [(h, slots[h]) for h in self.order if h in slots and h not in cooling]


def plan_generation(usable, min_np, max_np):
    """(hosts with the slots used, number of ranks), or None below min_np. Ranks fill the hosts
    in order, up to max_np (None: no limit)."""
    total = sum(s for _, s in usable)
    if total < min_np:
        return None
    np = total if max_np is None else min(total, max_np)
    plan, left = [], np
    for host, slots in usable:
        if left == 0:
            break
        take = min(slots, left)
        plan.append((host, take))
        left -= take
    return plan, np


def lost_hosts(records, mpirun_lines, plan):
    """The hosts to set aside after a failed generation, and a line describing the failure:
    the ranks the failure records name as lost or failed (with their hosts), else the ranks
    mpirun reports ended by a signal. `plan` maps ranks to hosts for mpirun's report."""
    named = {}
    for r in records:
        for lost in r.get("lost", []):
            named[lost["rank"]] = lost["host"]
    how = "named by the ranks' failure records"
    if not named:
        ranks = [h for h, s in plan for _ in range(s)]
        for line in mpirun_lines:
            m = MPIRUN_LOST.search(line)
            if m and int(m.group(1)) < len(ranks):
                named[int(m.group(1))] = m.group(2)
        how = "reported by mpirun"
    steps = [r["step"] for r in records if r.get("step", -1) >= 0]
    at = f" after step {max(steps)}" if steps else ""
    if not named:
        reasons = sorted({r["reason"] for r in records})
        return set(), ("no rank was named as lost" + at +
                        (f"; the ranks said: {reasons[0]}" if reasons else ""))
    who = ", ".join(f"rank {k} on {v}" for k, v in sorted(named.items()))
    # A rank that failed of itself names itself in its own record: its reason is the cause.
    own = sorted((r["rank"], r["reason"]) for r in records
                 if any(lost["rank"] == r["rank"] for lost in r.get("lost", [])))
    if own:
        return set(named.values()), f"{who} failed{at}: {own[0][1][:300]}"
    return set(named.values()), f"lost {who}{at} ({how})"


def read_records(folder, generation):
    records = []
    failures = os.path.join(folder, "failures")
    prefix = f"g{generation}."
    for name in sorted(os.listdir(failures)) if os.path.isdir(failures) else []:
        if name.startswith(prefix) and name.endswith(".json"):
            try:
                with open(os.path.join(failures, name)) as f:
                    records.append(json.load(f))
            except (OSError, ValueError):
                pass  # a record cut short: mpirun's report stands in
    return records


def _int(text, flag, lo):
    if not re.fullmatch(r"\d+", str(text)) or int(text) < lo:
        raise ValueError(f"{flag} must be an integer >= {lo}, got '{text}'")
    return int(text)


def elastic_settings(found, np):
    """The checked settings of an elastic job from its options and -np (None when absent)."""
    s = {"min_np": _int(found["min_np"], "--min-np", 1) if "min_np" in found else np,
         "max_np": _int(found["max_np"], "--max-np", 1) if "max_np" in found else None,
         "max_restarts": (_int(found["max_restarts"], "--max-restarts", 0)
                          if "max_restarts" in found else None),
         "discovery": found.get("discovery", ""),
         "slots_per_host": _int(found.get("slots_per_host", 1), "--slots-per-host", 1),
         "elastic_timeout": _int(found.get("elastic_timeout", ELASTIC_TIMEOUT_S),
                                 "--elastic-timeout", 0),
         "elastic_dir": found.get("elastic_dir", ""), "cooldown": None}
    if s["min_np"] is None:
        raise ValueError("an elastic job needs --min-np (or -np, its default)")
    if s["max_np"] is not None and s["max_np"] < s["min_np"]:
        raise ValueError(f"--max-np {s['max_np']} is below --min-np {s['min_np']}")
    if "cooldown" in found:
        lo, hi = found["cooldown"]
        if not (re.fullmatch(r"\d+", lo) and re.fullmatch(r"\d+", hi)) or \
                not COOLDOWN_LIMITS_S[0] <= int(lo) <= int(hi) <= COOLDOWN_LIMITS_S[1]:
            raise ValueError(f"--blacklist-cooldown-range takes LOW HIGH, whole seconds with "
                             f"{COOLDOWN_LIMITS_S[0]} <= LOW <= HIGH <= {COOLDOWN_LIMITS_S[1]}; "
                             f"got {lo} {hi}")
        s["cooldown"] = (int(lo), int(hi))
    return s


# ---- the loop -------------------------------------------------------------------------------

class Stop(Exception):
    """The supervisor gives up; the message says why."""


def _die_with_parent():
    """mpirun's preexec: TERM it when the supervisor dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """One elastic job: `command_for(hosts, np, env)` is the launcher's command for a
    generation (run.py's mpirun_command), `env` what the ranks get."""

    def __init__(self, settings, hosts, command_for, env):
        self.s = settings
        self.fixed_hosts = hosts  # -H / --hostfile: the hosts when there is no discovery script
        self.command_for = command_for
        self.env = env
        self.book = HostBook(settings["cooldown"])
        self.folder = os.path.abspath(settings["elastic_dir"] or
                                      f"tessera-elastic-{os.getpid()}")
        self.proc = None
        self.stopping = False

    def discover(self):
        if not self.s["discovery"]:
            return list(self.fixed_hosts)
        try:
            r = subprocess.run([self.s["discovery"]], capture_output=True, text=True,
                               timeout=DISCOVERY_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Stop(f"--host-discovery-script {self.s['discovery']}: {e}") from None
        if r.returncode != 0:
            raise Stop(f"--host-discovery-script {self.s['discovery']} failed (exit "
                       f"{r.returncode}): {r.stderr.strip()[-300:]}")
        try:
            return parse_discovery(r.stdout, self.s["slots_per_host"])
        except ValueError as e:
            raise Stop(f"--host-discovery-script {self.s['discovery']} printed {e}") from None

    def wait_for_slots(self):
        """The next generation's plan, once discovery shows --min-np usable slots."""
        deadline = time.monotonic() + self.s["elastic_timeout"]
        said = None
        while True:
            if self.stopping:
                raise Stop("stopped by a signal while waiting for hosts")
            found = self.discover()
            now = time.monotonic()
            usable = self.book.usable(found, now)
            planned = plan_generation(usable, self.s["min_np"], self.s["max_np"])
            if planned:
                return planned
            cooling = self.book.cooling(now)
            cool = ", ".join(f"{h} ({t:.0f} s)" for h, t in sorted(cooling.items()))
            have = sum(s for _, s in usable)
            line = (f"waiting for {self.s['min_np']} slots (--min-np): {have} usable on "
                    f"{', '.join(h for h, _ in usable) or 'no host'}" +
                    (f"; in cool-down: {cool}" if cooling else ""))
            more_may_come = self.s["discovery"] or any(
                t < deadline - now for t in cooling.values())
            if not more_may_come or now >= deadline:
                raise Stop(f"stopped: fewer than --min-np {self.s['min_np']} slots "
                           f"({have} usable) " +
                           (f"after waiting {self.s['elastic_timeout']} s (--elastic-timeout)"
                            if more_may_come else "and no host can come back") +
                           (f"; in cool-down: {', '.join(sorted(cooling))}" if cooling else ""))
            if line != said:
                say(line)
                said = line
            time.sleep(min(DISCOVERY_INTERVAL_S, max(0.05, deadline - now)))

    def launch(self, generation, plan, np):
        env = dict(self.env)
        env["TESSERA_ELASTIC_DIR"] = self.folder
        env["TESSERA_ELASTIC_GENERATION"] = str(generation)
        cmd = self.command_for(plan, np, env)
        say(f"generation {generation}: {np} ranks on " +
            ", ".join(f"{h}:{s}" for h, s in plan))
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     start_new_session=True, preexec_fn=_die_with_parent)
        lines = []
        readers = [threading.Thread(target=_relay, args=(pipe, out, lines), daemon=True)
                   for pipe, out in ((self.proc.stdout, sys.stdout),
                                     (self.proc.stderr, sys.stderr))]
        for t in readers:
            t.start()
        return readers, lines

    def watch(self, generation, np):
        """Waits for the generation's end, running discovery meanwhile: more usable slots (up to
        --max-np) become the notice the ranks read at their next commit."""
        noticed = False
        while self.proc.poll() is None:
            time.sleep(DISCOVERY_INTERVAL_S)
            if noticed or self.stopping or self.proc.poll() is not None:
                continue
            try:
                found = self.discover()
            except Stop as e:
                say(f"warning: {e}; keeping the hosts known")
                continue
            usable = self.book.usable(found, time.monotonic())
            planned = plan_generation(usable, self.s["min_np"], self.s["max_np"])
            if planned and planned[1] > np:
                _write_atomically(os.path.join(self.folder, "hosts-updated"), f"{generation}\n")
                say(f"discovery shows {planned[1]} usable slots (running {np}): the ranks "
                    "restart on them after their next commit")
                noticed = True
        return self.proc.returncode

    def run(self):
        os.makedirs(os.path.join(self.folder, "failures"), exist_ok=True)
        say(f"elastic job: --min-np {self.s['min_np']}, --max-np {self.s['max_np'] or 'any'}, "
            f"folder {self.folder}")
        generation, restarts = 0, 0
        while True:
            plan, np = self.wait_for_slots()
            readers, lines = self.launch(generation, plan, np)
            rc = self.watch(generation, np)
            for t in readers:
                t.join(timeout=5)
            if self.stopping:
                raise Stop(f"stopped by a signal; generation {generation} ended")
            if os.path.exists(os.path.join(self.folder, f"g{generation}.restart")):
                say(f"generation {generation} left at a commit to use more hosts")
            elif rc == 0:
                say(f"the job finished (generation {generation}, {restarts} restarts)")
                return 0
            else:
                hosts, what = lost_hosts(read_records(self.folder, generation), lines, plan)
                for h in sorted(hosts):
                    left = self.book.fail(h, time.monotonic())
                    say(f"host {h} failed: " + ("set aside for good (no "
                        "--blacklist-cooldown-range)" if left == math.inf else
                        f"in cool-down for {left:.0f} s"))
                say(f"generation {generation} failed (mpirun exit {rc}): {what}")
                if self.s["max_restarts"] is not None and restarts >= self.s["max_restarts"]:
                    raise Stop(f"stopped: {restarts} restarts used of --max-restarts "
                               f"{self.s['max_restarts']}; last failure: {what}")
                restarts += 1
                say(f"restart {restarts}" + (f" of {self.s['max_restarts']}"
                                             if self.s["max_restarts"] is not None else ""))
            generation += 1

    def stop(self, signum, _frame):
        """TERM/INT/HUP: ends mpirun's session (TERM, then KILL) and stops."""
        self.stopping = True
        if self.proc and self.proc.poll() is None:
            _end_session(self.proc)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt


def _relay(pipe, out, lines):
    for line in pipe:
        out.write(line)
        out.flush()
        lines.append(line)
        del lines[:-200]


def _end_session(proc):
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


def _write_atomically(path, text):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def supervise(settings, hosts, command_for, env):
    """Runs the elastic job; returns the exit status for `tessera run`."""
    sup = Supervisor(settings, hosts, command_for, env)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, sup.stop)
    try:
        return sup.run()
    except Stop as e:
        say(str(e))
        return EXIT_STOPPED
    except KeyboardInterrupt:
        say("interrupted; every rank ended")
        return 130
    finally:
        if sup.proc and sup.proc.poll() is None:
            _end_session(sup.proc)

