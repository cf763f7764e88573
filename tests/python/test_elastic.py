"""Elastic training's pure parts: the supervisor's planning (tessera/supervisor.py) and the
ElasticSampler's dealing across changes of the number of ranks (every sample of an epoch once).
The jobs themselves run on namespace hosts in tests/elastic_hosts.sh."""
import itertools
import math

import pytest

import tessera.torch as hvd
from tessera import supervisor as sv
from tessera.torch import elastic


def test_discovery_lines():
    assert sv.parse_discovery("a:2\nb\n\n# c:9\nc:4 # comment\n", 3) == \
        [("a", 2), ("b", 3), ("c", 4)]
    assert sv.parse_discovery("a:2\nb:1\na:5\n", 1) == [("b", 1), ("a", 5)]
    assert sv.parse_discovery("", 1) == []
    for bad in ("a:0", "a:x", ":3", "a b", "a:", "a:-1"):
        with pytest.raises(ValueError, match="line 1: .* is not host:slots"):
            sv.parse_discovery(bad, 1)


def test_cooldown_is_horovods_rule_within_the_range():
    for lo, hi in [(1, 1), (1, 2), (10, 100), (5, 3600)]:
        for times in range(1, 15):
            for u in (0.0, 0.25, 0.5, 0.999):
                got = sv.cooldown_s(times, lo, hi, u)
                assert lo <= got <= hi
                assert got == max(lo, min(hi, lo * 2 ** times + u * lo))
    assert sv.cooldown_s(200, 1, 3600, 0.5) == 3600  # no overflow for long-failing hosts


def test_host_book_orders_by_first_sight_and_sets_failed_hosts_aside():
    book = sv.HostBook(cooldown=(10, 100), uniform=lambda: 0.0)
    assert book.usable([("b", 2), ("a", 2)], 0) == [("b", 2), ("a", 2)]
    assert book.usable([("c", 1), ("a", 3), ("b", 2)], 0) == [("b", 2), ("a", 3), ("c", 1)]
    assert book.fail("b", 5) == 20  # 10 * 2 + 0
    assert book.usable([("a", 3), ("b", 2)], 6) == [("a", 3)]
    assert book.cooling(6) == {"b": 19}
    assert book.usable([("a", 3), ("b", 2)], 25) == [("b", 2), ("a", 3)]  # back, still first
    assert book.fail("b", 30) == 40  # its second failure: 10 * 4
    forever = sv.HostBook(cooldown=None)
    forever.usable([("a", 1)], 0)
    assert forever.fail("a", 0) == math.inf
    assert forever.usable([("a", 1)], 10 ** 9) == []


def test_generation_plans_fill_hosts_in_order_between_min_and_max():
    for slots in itertools.product([1, 2, 3], repeat=3):
        for used in range(0, 4):
            usable = [(f"h{i}", s) for i, s in enumerate(slots[:used])]
            total = sum(slots[:used])
            for min_np in range(1, 8):
                for max_np in [None] + list(range(min_np, 9)):
                    got = sv.plan_generation(usable, min_np, max_np)
                    if total < min_np:
                        assert got is None
                        continue
                    plan, np = got
                    assert np == (total if max_np is None else min(total, max_np))
                    assert sum(s for _, s in plan) == np
                    assert [h for h, _ in plan] == [h for h, _ in usable][:len(plan)]
                    assert all(take == dict(usable)[h] for h, take in plan[:-1])
                    assert 0 < plan[-1][1] <= dict(usable)[plan[-1][0]]


def test_failed_hosts_from_records_else_mpiruns_report():
    records = [{"generation": 0, "rank": 2, "host": "h1", "step": 7, "reason": "x",
                "lost": [{"rank": 3, "host": "h1"}]},
               {"generation": 0, "rank": 0, "host": "h0", "step": 6, "reason": "y",
                "lost": [{"rank": 3, "host": "h1"}]}]
    hosts, what = sv.lost_hosts(records, [], [("h0", 2), ("h1", 2)])
    assert hosts == {"h1"}
    assert what == "lost rank 3 on h1 after step 7 (named by the ranks' failure records)"
    line = ("mpirun noticed that process rank 2 with PID 41 on node h1 exited on signal 9 "
            "(Killed).\n")
    hosts, what = sv.lost_hosts([], ["noise\n", line], [("h0", 2), ("h1", 2)])
    assert hosts == {"h1"} and what == "lost rank 2 on h1 (reported by mpirun)"
    own = {"generation": 0, "rank": 1, "host": "h0", "step": 3,
           "reason": "rank 1 failed: ValueError: a planted bug",
           "lost": [{"rank": 1, "host": "h0"}]}
    hosts, what = sv.lost_hosts([own], [], [("h0", 2), ("h1", 2)])
    assert hosts == {"h0"}
    assert what == "rank 1 on h0 failed after step 3: rank 1 failed: ValueError: a planted bug"
    hosts, what = sv.lost_hosts([{"step": -1, "reason": "rank 0 failed: boom", "lost": []}],
                                [], [("h0", 1)])
    assert hosts == set() and "no rank was named as lost; the ranks said: rank 0 failed" in what


def test_elastic_settings_checks_each_option():
    s = sv.elastic_settings({"min_np": "2", "max_np": "4", "cooldown": ("10", "100")}, None)
    assert (s["min_np"], s["max_np"], s["cooldown"], s["max_restarts"]) == (2, 4, (10, 100), None)
    assert sv.elastic_settings({}, 3)["min_np"] == 3  # -np is --min-np's default
    for found, np, message in [
            ({}, None, "needs --min-np"),
            ({"min_np": "4", "max_np": "2"}, None, "--max-np 2 is below --min-np 4"),
            ({"min_np": "0"}, None, "--min-np must be an integer >= 1"),
            ({"min_np": "2", "max_restarts": "-1"}, None, "--max-restarts must be"),
            ({"min_np": "2", "cooldown": ("0", "5")}, None, "1 <= LOW <= HIGH <= 3600"),
            ({"min_np": "2", "cooldown": ("9", "5")}, None, "LOW HIGH"),
            ({"min_np": "2", "cooldown": ("1", "4000")}, None, "got 1 4000"),
            ({"min_np": "2", "slots_per_host": "x"}, None, "--slots-per-host")]:
        with pytest.raises(ValueError, match=message):
            sv.elastic_settings(found, np)


def _deal(monkeypatch, n, r, samples, seed, state):
    monkeypatch.setattr(elastic, "size", lambda: n)
    monkeypatch.setattr(elastic, "rank", lambda: r)
    s = elastic.ElasticSampler(range(samples), shuffle=True, seed=seed)
    s.load_state_dict(state)
    return s


@pytest.mark.parametrize("samples", [1, 7, 30, 41])
def test_sampler_sees_every_sample_of_the_epoch_once_across_size_changes(monkeypatch, samples):
    """Sizes change after some common batches; each generation's ranks process their shares'
    first `done` batches (committed); the last generation processes the rest. Every sample of
    the epoch is processed exactly once, whatever the sizes and batch size."""
    for sizes in [(4, 3), (2, 5), (3, 1), (1, 4, 2), (4, 4)]:
        for batch in (1, 2, 3, 5):
            for done in range(0, 4):
                state = {"epoch": 2, "processed_num": 0}
                seen = []
                for g, n in enumerate(sizes):
                    samplers = [_deal(monkeypatch, n, r, samples, 11, state) for r in range(n)]
                    shares = [list(s) for s in samplers]
                    assert max(map(len, shares)) - min(map(len, shares)) <= 1
                    last = g == len(sizes) - 1
                    common = samplers[0].common_batches(batch)
                    k = max(map(len, shares)) if last else min(done, common)
                    for share in shares:
                        seen += share[:k * batch]
                    for s in samplers:
                        for b in range(k if not last else 0):
                            s.record_batch(b, batch)
                    state = samplers[0].state_dict()
                    assert all(s.state_dict() == state for s in samplers)
                assert sorted(seen) == list(range(samples)), (sizes, batch, done)


def test_sampler_common_batches_is_what_every_rank_has(monkeypatch):
    for samples in range(0, 40):
        for n in range(1, 6):
            for batch in range(1, 6):
                shares = [list(_deal(monkeypatch, n, r, samples, 0,
                                     {"epoch": 0, "processed_num": 0})) for r in range(n)]
                common = _deal(monkeypatch, n, 0, samples, 0,
                               {"epoch": 0, "processed_num": 0}).common_batches(batch)
                assert common == min(math.ceil(len(s) / batch) for s in shares)


def test_sampler_epochs_differ_and_set_epoch_starts_afresh(monkeypatch):
    a = _deal(monkeypatch, 1, 0, 50, 3, {"epoch": 0, "processed_num": 20})
    assert len(a) == 30
    first = list(a)
    a.set_epoch(1)
    assert len(a) == 50 and sorted(a) == list(range(50)) and list(a)[:30] != first


def test_horovods_names_are_there():
    for name in ("run", "TorchState", "ElasticSampler", "HostsUpdatedInterrupt", "State",
                 "HorovodInternalError"):
        assert hasattr(hvd.elastic, name)
    assert hvd.elastic.HorovodInternalError is hvd.HorovodInternalError
    assert issubclass(hvd.elastic.HostsUpdatedInterrupt, RuntimeError)
    assert hvd.elastic.HostsUpdatedInterrupt(skip_sync=True).skip_sync


def test_torch_state_restores_the_last_commit_outside_an_elastic_job():
    import torch
    model = torch.nn.Linear(3, 2).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, opt, epoch=3, seen=torch.zeros(4))
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    state.seen[1] = 1
    state.commit()  # not under the supervisor: in memory only, no host update
    kept = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)
    state.epoch, state.seen[2] = 9, 5
    opt.param_groups[0]["lr"] = 7.0
    state.restore()
    assert all(torch.equal(model.state_dict()[k], kept[k]) for k in kept)
    assert state.epoch == 3 and state.seen.tolist() == [0, 1, 0, 0]
    assert opt.param_groups[0]["lr"] == 0.1
    calls = []
    state.register_reset_callbacks([lambda: calls.append(hvd.size())])
    state.on_reset()
    assert calls == [hvd.size()]
