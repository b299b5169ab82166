"""SSA's fused CPU training node (ssa_repro/scorers/ssa_cpu.py): its C loops against the float64 formula
(values and the gradients of q, k, v, b and n), the path SSA.attend takes, the same numbers run to run
and over threads, and the torch node when there is no compiler."""

from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.scorers import SCORERS, build_scorer, ssa_cpu
from ssa_repro.scorers.ssa import SSAFoldedWeights

pytestmark = pytest.mark.skipif(
    ssa_cpu.library() is None, reason="no C compiler: SSA trains through the torch node"
)


def formula(q, k, v, b, n, mask):
    """softmax_j(n·sgn(x)·log1p(b|x|)) @ v of x = q·kᵀ, written out (float64 inputs: the reference)."""
    x = q @ k.transpose(-2, -1)
    t = torch.sign(x) * n * torch.log1p(b * x.abs())
    if mask is not None:
        t = t.masked_fill(~mask, float("-inf"))
    return torch.softmax(t, -1) @ v


@pytest.mark.parametrize(
    ("bsz", "h", "t", "s", "d", "heads_b", "masked"),
    [
        (3, 4, 37, 37, 16, 4, True),  # causal, per head, rows not a multiple of the vector width
        (2, 2, 5, 5, 8, 1, False),  # one (b, n) per layer, no mask
        (2, 3, 7, 11, 4, 3, True),  # a general [T, S] mask, T != S
        (1, 1, 1, 1, 2, 1, False),  # one key
    ],
)
def test_fused_node_equals_the_float64_formula(bsz, h, t, s, d, heads_b, masked):
    g = torch.Generator().manual_seed(0)
    q, k, v = (3 * torch.randn(bsz, h, n_, d, generator=g) for n_ in (t, s, s))
    b = 0.2 + torch.rand(heads_b, 1, 1, generator=g)
    n = 1.0 + 2 * torch.rand(heads_b, 1, 1, generator=g)
    mask = None
    if masked:
        mask = torch.rand(t, s, generator=g) > 0.4
        mask[:, 0] = True  # every query sees a key
        if t == s:
            mask = torch.ones(t, s, dtype=torch.bool).tril()
    gy = torch.randn(bsz, h, t, d, generator=g)
    ins = [x.clone().requires_grad_() for x in (q, k, v, b, n)]
    y = ssa_cpu.SSAFusedAttention.apply(*ins, mask)
    y.backward(gy)
    ref_ins = [x.double().requires_grad_() for x in (q, k, v, b, n)]
    ref = formula(*ref_ins, mask)
    ref.backward(gy.double())
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    # b's and n's gradients are sums over B·T·S terms of both signs (float32 within a row): 1e-4
    for name, a, r, tol in zip("qkvbn", ins, ref_ins, (1e-5, 1e-5, 1e-5, 1e-4, 1e-4)):
        scale = r.grad.abs().max().item() + 1e-12
        assert (a.grad.double() - r.grad).abs().max().item() <= tol * scale, name


def test_masked_keys_get_exactly_zero_weight():
    """A masked key's value never reaches the output: the largest float32 as its value (seen only by the
    last query) changes no other row, which holds only if its weight is exactly 0 (a weight of even
    1e-38 would add 3.4 there)."""
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    b, n = torch.full((2, 1, 1), 0.5), torch.full((2, 1, 1), 1.5)
    v_last = v.clone()
    v_last[:, :, -1] = torch.finfo(torch.float32).max
    y = ssa_cpu.SSAFusedAttention.apply(q, k, v, b, n, mask)
    y_last = ssa_cpu.SSAFusedAttention.apply(q, k, v_last, b, n, mask)
    assert torch.equal(y[:, :, :-1], y_last[:, :, :-1])


def scorer(**kw):
    cfg = OmegaConf.merge(OmegaConf.structured(SCORERS.schemas["ssa"]()), kw)
    return build_scorer(cfg, 4)


@pytest.mark.parametrize("kw", [{}, {"per_head": False}, {"param": "exp", "b_init": 2.0}])
def test_attend_trains_through_the_fused_node_with_the_torch_nodes_numbers(kw, monkeypatch):
    """SSA.attend with gradients on takes SSAFusedAttention (b > 0, float32, no bias), and its output and
    gradients are the torch node's (SSAFoldedWeights) to float32 rounding."""
    s = scorer(**kw)
    calls = []
    real = ssa_cpu.SSAFusedAttention.apply
    monkeypatch.setattr(ssa_cpu.SSAFusedAttention, "apply", lambda *a: calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 4, 9, 8, generator=g) for _ in range(3))
    mask = torch.ones(9, 9, dtype=torch.bool).tril()

    def run(fused: bool):
        monkeypatch.setattr(ssa_cpu, "FUSED", fused)
        s.zero_grad()
        ins = [x.clone().requires_grad_() for x in (q, k, v)]
        y, _ = s.attend(*ins, mask, is_causal=True)
        y.square().sum().backward()
        return [y.detach()] + [x.grad for x in ins] + [p.grad.clone() for p in s.parameters()]

    fused = run(True)
    assert calls == [1]
    node = run(False)
    assert calls == [1]  # FUSED=False: the torch node
    for a, r in zip(fused, node):
        torch.testing.assert_close(a, r, rtol=2e-5, atol=2e-6)


def test_float64_bias_and_raw_keep_the_torch_node(monkeypatch):
    """float64 (gradcheck's dtype), an additive bias and param=raw (b may be <= 0) are not the C loops'."""
    monkeypatch.setattr(ssa_cpu.SSAFusedAttention, "apply", lambda *a: pytest.fail("took the fused node"))
    q = torch.randn(2, 4, 5, 8, requires_grad=True)
    s = scorer()
    s.attend(q.double(), q.double(), q.double(), None)
    s.attend(q, q, q, None, bias=torch.zeros(4, 5, 5))
    scorer(param="raw", b_init=0.8).attend(q, q, q, None)


def _step_bits(threads: int, mask) -> list[torch.Tensor]:
    """The output and the gradients of q, k, v, b and n of one call with ``threads`` torch threads."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(2)
        q, k, v = (torch.randn(8, 4, 30, 16, generator=g) for _ in range(3))
        b, n = (torch.full((4, 1, 1), x, requires_grad=True) for x in (0.3, 1.5))
        ins = [x.clone().requires_grad_() for x in (q, k, v)]
        y = ssa_cpu.SSAFusedAttention.apply(*ins, b, n, mask)
        y.sum().backward()
        return [y, b.grad, n.grad] + [x.grad for x in ins]
    finally:
        torch.set_num_threads(old)


CAUSAL = torch.ones(30, 30, dtype=torch.bool).tril()


@pytest.mark.parametrize("threads", [1, 2])
def test_the_same_numbers_run_to_run(threads):
    """The sums for b and n are kept per query and added in query order: two calls give the same bits
    (CPU resume stays bit-exact), with one thread or several."""
    first, again = _step_bits(threads, CAUSAL), _step_bits(threads, CAUSAL)
    assert all(torch.equal(a, c) for a, c in zip(first, again))


def test_the_sums_for_b_and_n_do_not_depend_on_the_thread_count():
    """b's and n's gradients (sums over every score of a head) come out the same bits on one thread and
    on two: the C loops' sums are per query, added in query order after the threads join."""
    one, two = _step_bits(1, CAUSAL), _step_bits(2, CAUSAL)
    assert torch.equal(one[1], two[1]) and torch.equal(one[2], two[2])
    for a, c in zip(one, two):  # the rest to rounding (bmm's blocking may differ with the threads)
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-6)


def test_irregular_masks_and_a_query_that_sees_no_key(monkeypatch):
    """A mask that is no suffix of queries (key 2: queries 0, 3 and 4), a key seen by no query (4) and a
    query that sees no key (1): the queries that see keys match the torch node, outputs and gradients;
    query 1 gets equal weights on every key (masked_softmax's convention, as the torch node's forward)
    and passes no gradient to q, k, b or n (its weights do not depend on them; the torch node's n-gradient
    there is meaningless: t + LOWEST times g_t)."""
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[1] = False
    mask[4, 4] = False
    mask[0, 2], mask[2, 2] = True, False
    s = scorer()
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
    seen = torch.ones(5, 1).index_fill_(0, torch.tensor([1]), 0.0)  # loss weight per query

    def run(fused: bool, weight):
        monkeypatch.setattr(ssa_cpu, "FUSED", fused)
        s.zero_grad()
        ins = [x.clone().requires_grad_() for x in (q, k, v)]
        y, _ = s.attend(*ins, mask)
        (y.square() * weight).sum().backward()
        return [y.detach()] + [x.grad for x in ins] + [p.grad.clone() for p in s.parameters()]

    for a, r in zip(run(True, seen), run(False, seen)):
        torch.testing.assert_close(a, r, rtol=2e-5, atol=2e-6)
    y, gq, gk, gv, *gp = run(True, 1.0 - seen)  # the loss on query 1 only
    torch.testing.assert_close(y[:, :, 1], v.mean(2))
    assert all(bool((x == 0).all()) for x in (gq, gk, *gp)) and bool(gv.abs().sum() > 0)


def test_a_compiler_without_openmp_builds_the_one_thread_loops(monkeypatch, tmp_path):
    """Where -fopenmp fails (a compiler without OpenMP: here a wrapper refusing it), the loops build
    without it and give the OpenMP build's numbers on one thread (the same C, no threads)."""
    cc = ssa_cpu.c_compiler()
    wrapper = tmp_path / "cc"
    wrapper.write_text(
        f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && {{ echo "no openmp" >&2; exit 1; }}; done\n'
        f'exec {cc} "$@"\n'
    )
    wrapper.chmod(0o755)
    expected = _step_bits(1, CAUSAL)
    monkeypatch.setattr(ssa_cpu, "_state", {})
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("SSA_REPRO_CACHE", str(tmp_path / "cache"))
    assert ssa_cpu.library() is not None
    assert len(list((tmp_path / "cache").glob("*.so"))) == 1
    for a, c in zip(expected, _step_bits(2, CAUSAL)):
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-6)


def test_no_compiler_falls_back_to_the_torch_node_saying_why(monkeypatch, caplog):
    monkeypatch.setattr(ssa_cpu, "_state", {})
    monkeypatch.setattr(ssa_cpu, "c_compiler", lambda: None)
    with caplog.at_level(logging.WARNING, logger=ssa_cpu.__name__):
        assert ssa_cpu.library() is None
        assert ssa_cpu.library() is None  # decided once
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "no C compiler" in warned[0] and "torch node" in warned[0]
    monkeypatch.setattr(ssa_cpu.SSAFusedAttention, "apply", lambda *a: pytest.fail("took the fused node"))
    q = torch.randn(2, 4, 5, 8, requires_grad=True)
    y, _ = scorer().attend(q, q, q, None)
    y.sum().backward()  # through the torch node
    assert q.grad is not None


def test_a_failing_build_falls_back(monkeypatch, tmp_path, caplog):
    """A compiler that fails (here: a script that exits 1) is reported once; the torch node trains."""
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'error: broken' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setattr(ssa_cpu, "_state", {})
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("SSA_REPRO_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger=ssa_cpu.__name__):
        assert ssa_cpu.library() is None
    assert "error: broken" in caplog.records[0].getMessage()
    assert not ssa_cpu.applies(*(torch.randn(1, 1, 2, 2),) * 3, None, None)


def test_the_build_cache_is_kept_per_cpu(monkeypatch, tmp_path):
    """-march=native builds for the CPU it runs on: a cache shared by machines of other CPUs (here two
    pretended ones) holds one library each and never hands one CPU the other's; the same CPU reuses its."""
    if ssa_cpu.c_compiler() is None:
        pytest.skip("no C compiler on PATH")
    monkeypatch.setenv("SSA_REPRO_CACHE", str(tmp_path))
    built = []
    for cpu in (
        "model name : A\nflags : sse2",
        "model name : B\nflags : sse2 avx512f",
        "model name : A\nflags : sse2",
    ):
        monkeypatch.setattr(ssa_cpu, "host_cpu", lambda cpu=cpu: cpu)
        ssa_cpu._build()
        built.append(sorted(p.name for p in tmp_path.glob("*.so")))
    assert len(built[0]) == 1 and len(built[1]) == 2 and built[2] == built[1]


def test_torch_node_reference_agrees_with_formula():
    """The torch node this file compares against is itself the formula (float64), so the comparison above
    is to an independent reference twice over."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    b, n = torch.full((2, 1, 1), 0.7, dtype=torch.float64), torch.full((2, 1, 1), 1.3, dtype=torch.float64)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    w = SSAFoldedWeights.apply(b * (q @ k.transpose(-2, -1)), n, mask)
    torch.testing.assert_close(w @ v, formula(q, k, v, b, n, mask))


def _one_thread_step(_=None):
    torch.set_num_threads(1)
    q = torch.randn(8, 4, 20, 16, requires_grad=True)
    y = ssa_cpu.SSAFusedAttention.apply(q, q, q, torch.full((4, 1, 1), 0.3), torch.full((4, 1, 1), 1.5), None)
    y.sum().backward()
    return bool(torch.isfinite(q.grad).all())


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork on this platform")
def test_a_forked_child_on_one_thread_runs_the_node():
    """After the parent ran the node on two OpenMP threads, a child forked from it (a DataLoader worker,
    multiprocessing) runs the node on one thread, as torch's own OpenMP ops need there, instead of
    waiting on its parent's threads."""
    import multiprocessing

    _step_bits(2, CAUSAL)  # the parent's OpenMP team is up
    child = multiprocessing.get_context("fork").Process(target=_one_thread_step)
    child.start()
    child.join(timeout=120)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0
