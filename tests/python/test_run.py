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
    env = {"TESSERA_TIMEOUT": "9", "OMP_NUM_THREADS": "1", "PYTHONPATH": "/p", "HOME": "/root"}
    cmd = run.mpirun_command(4, [], ["python3", "t.py"], env, cpus=2)
    assert cmd[:8] == ["mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot",
                       "--oversubscribe"]
    assert cmd[-2:] == ["python3", "t.py"]
    forwarded = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"]
    assert forwarded == ["OMP_NUM_THREADS", "PYTHONPATH", "TESSERA_TIMEOUT"]  # not HOME
    cmd = run.mpirun_command(2, [("a", 1), ("b", 1)], ["x"], {}, cpus=64)
    assert "-H" in cmd and cmd[cmd.index("-H") + 1] == "a:1,b:1"
    assert "--oversubscribe" not in cmd
    with pytest.raises(ValueError, match="more ranks than the 2 slots"):
        run.mpirun_command(3, [("a", 1), ("b", 1)], ["x"], {}, cpus=64)


def test_slurm_allocation_uses_srun_unless_hosts_are_given(monkeypatch):
    monkeypatch.setattr(run.shutil, "which", lambda name: "/usr/bin/" + name)
    cmd, _ = run.build(["-np", "2", "python3", "t.py"], {"SLURM_JOB_ID": "7"})
    assert cmd == ["srun", "--ntasks", "2", "--mpi=pmix", "python3", "t.py"]
    cmd, _ = run.build(["-np", "2", "-H", "a:2", "x"], {"SLURM_JOB_ID": "7"})
    assert cmd[0] == "mpirun"


def test_unreachable_host_fails_clearly(capsys):
    assert run.main(["-np", "1", "-H", "nosuchhost.invalid:1", "true"]) == 2
    assert "cannot reach host nosuchhost.invalid" in capsys.readouterr().err


def test_bad_arguments_fail_clearly(capsys):
    assert run.main(["-np", "0", "true"]) == 2
    assert "-np must be at least 1" in capsys.readouterr().err
    assert run.main(["-np", "2"]) == 2
    assert "no command to run" in capsys.readouterr().err
