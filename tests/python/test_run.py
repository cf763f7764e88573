"""tessera run's command composition (pure) and its refusals."""
import pytest

from tessera import run


def test_hosts_parse_and_bad_hosts_say_the_form():
    assert run.parse_hosts("a:2,b:3") == [("a", 2), ("b", 3)]
    assert run.parse_hosts("a") == [("a", 1)]
    for bad in ("a:x", ":2", "a:0", "a:2,,b"):
        with pytest.raises(ValueError, match="host\\[:slots\\]"):
            run.parse_hosts(bad)


def test_mpirun_command_places_binds_forwards_and_oversubscribes():
    env = {"TESSERA_TIMEOUT": "9", "OMP_NUM_THREADS": "1", "PYTHONPATH": "/p", "HOME": "/root",
           "MY_VAR": "x", "OLDPWD": "/", "BASH_FUNC_f%%": "()", "CUDA_VISIBLE_DEVICES": "0",
           "OMPI_COMM_WORLD_RANK": "3", "HOSTNAME": "here"}
    cmd = run.mpirun_command(4, [], ["python3", "t.py"], env, cpus=2)
    assert cmd[:8] == ["mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot",
                       "--oversubscribe"]
    assert cmd[-2:] == ["python3", "t.py"]
    forwarded = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"]
    # The whole environment, as horovodrun, less what belongs to this shell or host.
    assert forwarded == ["HOME", "MY_VAR", "OMP_NUM_THREADS", "PYTHONPATH", "TESSERA_TIMEOUT"]
    cmd = run.mpirun_command(2, [("a", 1), ("b", 1)], ["x"], {}, cpus=64)
    assert "-H" in cmd and cmd[cmd.index("-H") + 1] == "a:1,b:1"
    assert "--oversubscribe" not in cmd
    with pytest.raises(ValueError, match="more ranks than the 2 slots"):
        run.mpirun_command(3, [("a", 1), ("b", 1)], ["x"], {}, cpus=64)


def test_horovodrun_options_compose_the_command():
    env = {}
    cmd, hosts, _ = run.build(["-np", "2", "-H", "a:2", "--mpi-args", "--mca btl tcp,self -v",
                               "--network-interface", "eth1", "--output-filename", "/tmp/o",
                               "--ssh-port", "2222", "--ssh-identity-file", "/k",
                               "--timeline-filename", "/tmp/t.json", "--autotune", "--verbose",
                               "python3", "t.py", "--lr", "0.1"], env)
    assert hosts == [("a", 2)]
    assert cmd[-4:] == ["python3", "t.py", "--lr", "0.1"]
    assert cmd[-7:-4] == ["btl", "tcp,self", "-v"]  # --mpi-args split as a shell would
    joined = " ".join(cmd)
    assert "--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1" in joined
    assert "--output-filename /tmp/o" in joined
    assert cmd[cmd.index("plm_rsh_args") + 1] == "-p 2222 -i /k"
    assert env["TESSERA_TIMELINE"] == "/tmp/t.json" and env["TESSERA_AUTOTUNE"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "eth1" and env["TESSERA_LOG_LEVEL"] == "info"
    # A value that starts with '-' or holds a space is the option's, never the program.
    opts, command = run.parse_args(["-np", "1", "--mpi-args", "--bind-to core", "prog"])
    assert opts["mpi_args"] == "--bind-to core" and command == ["prog"]
    opts, command = run.parse_args(["-np=3", "--mpi-args=-x A", "--", "-weird-prog"])
    assert opts["np"] == "3" and opts["mpi_args"] == "-x A" and command == ["-weird-prog"]
    with pytest.raises(ValueError, match="unknown option --nope"):
        run.parse_args(["-np", "1", "--nope", "prog"])


def test_hostfile_lines_as_horovod_and_open_mpi_write_them(tmp_path):
    assert run.parse_hostfile("# cluster\nnode1 slots=4\nnode2:2\n\nnode3  # one\n") == \
        [("node1", 4), ("node2", 2), ("node3", 1)]
    for bad in ("node1 slots=0", "node1 slots=x", "node1 cpus=2", ""):
        with pytest.raises(ValueError, match="line 1|lists no host"):
            run.parse_hostfile(bad)
    f = tmp_path / "hosts"
    f.write_text("localhost slots=2\n")
    cmd, hosts, _ = run.build(["-np", "2", "--hostfile", str(f), "x"], {})
    assert hosts == [("localhost", 2)] and cmd[cmd.index("-H") + 1] == "localhost:2"
    with pytest.raises(ValueError, match="not both"):
        run.build(["-np", "2", "--hostfile", str(f), "-H", "a:2", "x"], {})
    with pytest.raises(ValueError, match="No such file"):
        run.build(["-np", "2", "--hostfile", str(tmp_path / "none"), "x"], {})


def test_horovod_knobs_map_to_tessera_settings_and_the_rest_are_named():
    env = {"HOROVOD_FUSION_THRESHOLD": "67108864", "HOROVOD_CYCLE_TIME": "3.5",
           "HOROVOD_TIMELINE": "/t.json", "HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "120", "HOROVOD_AUTOTUNE": "1",
           "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_LOG_LEVEL": "TRACE",
           "HOROVOD_CACHE_CAPACITY": "0", "HOROVOD_GPU_OPERATIONS": "NCCL",
           "HOROVOD_MPI_THREADS_DISABLE": "1", "TESSERA_CYCLE_TIME": "2"}
    ignored = run.map_horovod_knobs(env)
    assert ignored == ["HOROVOD_GPU_OPERATIONS", "HOROVOD_MPI_THREADS_DISABLE"]
    assert env["TESSERA_FUSION_THRESHOLD"] == "67108864"
    assert env["TESSERA_CYCLE_TIME"] == "2"  # set explicitly: it wins
    assert env["TESSERA_TIMELINE"] == "/t.json"
    assert env["TESSERA_STALL_CHECK_TIME"] == "30"
    assert env["TESSERA_STALL_SHUTDOWN_TIME"] == "120"
    assert env["TESSERA_AUTOTUNE"] == "1"
    assert env["TESSERA_ALLREDUCE"] == "hierarchical"
    assert env["TESSERA_LOG_LEVEL"] == "debug"
    assert env["TESSERA_CACHE_CAPACITY"] == "0"


def test_slurm_allocation_uses_srun_unless_hosts_are_given(monkeypatch):
    monkeypatch.setattr(run.shutil, "which", lambda name: "/usr/bin/" + name)
    cmd, _, _ = run.build(["-np", "2", "python3", "t.py"], {"SLURM_JOB_ID": "7"})
    assert cmd == ["srun", "--ntasks", "2", "--mpi=pmix", "python3", "t.py"]
    cmd, _, _ = run.build(["-np", "2", "-H", "a:2", "x"], {"SLURM_JOB_ID": "7"})
    assert cmd[0] == "mpirun"


def test_unreachable_host_fails_clearly(capsys):
    assert run.main(["-np", "1", "-H", "nosuchhost.invalid:1", "true"]) == 2
    assert "cannot reach host nosuchhost.invalid" in capsys.readouterr().err


def test_bad_arguments_fail_clearly(capsys):
    assert run.main(["-np", "0", "true"]) == 2
    assert "-np must be at least 1" in capsys.readouterr().err
    assert run.main(["-np", "2"]) == 2
    assert "no command to run" in capsys.readouterr().err


def test_elastic_options_make_a_supervised_job():
    """Horovod's elastic options take `tessera run` to its supervisor: build returns the checked
    settings and the command of a generation, mpirun's on the hosts the supervisor picks."""
    env = {"PATH": "/bin"}
    job, hosts, _ = run.build(["--min-np", "2", "--max-np=4", "--max-restarts", "3",
                               "--host-discovery-script", "./hosts.sh", "--slots-per-host", "2",
                               "--blacklist-cooldown-range", "10", "100", "--elastic-timeout",
                               "30", "--elastic-dir", "/shared/e", "python3", "t.py", "--x"], env)
    settings, command_for = job
    assert hosts == []
    assert settings == {"min_np": 2, "max_np": 4, "max_restarts": 3, "discovery": "./hosts.sh",
                        "slots_per_host": 2, "elastic_timeout": 30, "elastic_dir": "/shared/e",
                        "cooldown": (10, 100)}
    cmd = command_for([("h0", 2), ("h1", 1)], 3, {"PATH": "/bin", "TESSERA_ELASTIC_DIR": "/e"})
    assert cmd[:3] == ["mpirun", "-np", "3"]
    assert cmd[cmd.index("-H") + 1] == "h0:2,h1:1"
    assert [cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"] == ["PATH", "TESSERA_ELASTIC_DIR"]
    assert cmd[-3:] == ["python3", "t.py", "--x"]
    # -np alone is --min-np's default; fixed hosts stand in for discovery.
    (settings, _), hosts, _ = run.build(["-np", "2", "--max-np", "4", "-H", "a:2,b:2",
                                         "python3", "t.py"], {})
    assert settings["min_np"] == 2 and hosts == [("a", 2), ("b", 2)]
    for argv, message in [
            (["--min-np", "2", "python3", "t.py"], "needs its hosts"),
            (["--min-np", "2", "-H", "a:2", "--launcher", "srun", "p"], "through mpirun"),
            (["--min-np", "2", "-H", "a", "--blacklist-cooldown-range", "5"], "two values"),
            (["--min-np", "2", "-H", "a", "--blacklist-cooldown-range", "5", "x", "p"],
             "LOW HIGH"),
            (["--max-np", "2", "-H", "a", "p"], "needs --min-np")]:
        with pytest.raises(ValueError, match=message):
            run.build(argv, {})
