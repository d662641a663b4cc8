"""Benchmark of the tail-shape classifier on labelled synthetic latencies.

Usage::

    python bench/classifier.py [--seed 4099] [--count 800] [--jobs 2] [--dump rows.csv]
    python bench/classifier.py --shapes          # the earlier, shape-drawn benchmark
    python bench/classifier.py --seed 101:200 --save rows101.pkl  # rows for the fit
    python bench/fit_calibration.py --rows rows*.pkl --write      # the probability model

By default the four classes are *simulated from their mechanisms* (see "Mechanisms"
below); ``--shapes`` draws them as shapes made to order instead (the earlier
benchmark, "How the samples are made"). Draws ``--count`` samples, the four classes in
equal numbers, with sizes log-uniform in [50, 100000], classifies each with
:func:`nsysdiag.stats.classifier.classify_tail`, and prints per-class accuracy (all
sizes and n >= 200), the confusion matrix and the expected calibration error (ECE, 10
equal-width confidence bins): overall, and per class three ways -- the classwise ECE
(Kull et al. 2019: the probability of class k on every sample against the frequency of
k), per verdict and per true class (:func:`calibration_report`). Targets: accuracy
>= 0.95 per class at n >= 200; ECE <= 0.05 overall, classwise for every class and per
verdict, over all sizes (per true class printed too, aim <= 0.05).

Development seeds: the decision rules were tuned on seeds 1, 31-33 and 101-104; the
probability model (``nsysdiag/stats/calibration.json``) is fitted by
``bench/fit_calibration.py`` on seeds 1 (800 samples) and 101-110 (200 each). Seed 2027
was reported by an earlier revision; the held-out seed 4099, used for nothing else, is
the one reported now (``docs/classifier.md``). A ``window_ratio`` column and two lines
of the report say which windows of abnormal mechanisms show no abnormal tail
themselves (their own p99/p50 <= 2: step A of the method says `tight` for them).

Mechanisms (the default)
------------------------
- ``right_skewed`` = queueing. FIFO queues simulated customer by customer (Lindley's
  recursion for one server, earliest-free server for c = 2-8), after 1000 customers of
  burn-in, sojourn time (wait + service) measured. Arrivals: Poisson, bursty (a
  two-state MMPP, bursts of 5-50 arrivals up to 1.5x the capacity) or periodic with
  jitter; service: deterministic (a tight body), exponential, log-normal (sigma
  0.2-1), hyper-exponential, or a fixed GPU part plus an exponential CPU part; load
  0.5-0.95. Thread pools: 2-16 workers, log-normal work, plus an OS wake-up delay for
  requests that found every worker busy. A fifth carry mild GPU jitter (30 % of
  requests 1.05-1.3x slower).
- ``multimodal`` = GPU execution jitter. On/off contention: another workload holds the
  GPU in exponential on/off periods (4-40 requests long, on 15-50 % of the time); the
  request progresses 1/f as fast (f = 1.6-4) while it is on, time-stepped so requests
  that straddle a switch are partly slowed. Clock drops: runs of requests (a Markov
  chain, mean run 1-10) 1.5-3x slower. Code paths: 2-4 discrete paths 1.5-3x apart.
- ``flat_tail`` = transfer contention. With probability 3-40 % a copy finds the link
  busy and waits for the rest of a competing transfer (uniform over its length,
  1.5-20x the median, with up to 15 % spread), shares the link for a uniform overlap,
  or meets a periodic competitor of fixed length.
- ``tight``: the body alone, the body behind a lightly loaded queue (load <= 0.4), or
  small contention waits (<= 0.6x the median).
- Mixtures: a quarter of the multimodal and flat_tail samples pass through a lightly
  loaded Poisson queue (load 0.01-0.08) in front.

Windows must be long enough to see the mechanism: on periods, slow runs and bursts
last at most a few dozen requests.

How the samples are made with ``--shapes`` (see ``docs/classifier.md``)
---------------------------------------------------------------------
Every sample starts from a *body* modelled on the real H200 request latencies of the
corpus: one to three close sub-modes (up to 1.3x apart, as in the healthy trace, whose
request times have modes at 1.73 and 2.17 ms), each log-normal with sigma 0.015-0.08,
plus a small exponential jitter (mild right skew). The median is log-uniform in
[30 us, 30 ms] (from 50 us with a 1 us timer). Each class then adds its mechanism:

- ``tight``: the body alone, or with mild queueing, a log-normal, or a close slow mode
  (1.2-1.7x, like the ``forward`` range of the GPU-jitter trace); population
  p99/p50 <= 1.8.
- ``right_skewed``: queueing delays added to 50-100 % of requests (exponential,
  Pareto-like, gamma or log-normal waits), or a broad log-normal; p99/p50 >= 2.2.
- ``multimodal``: one or two slow modes 1.5-6x the body with 3-50 % of requests each,
  a scaled copy of the body (3-40 % of requests 1.5-3.5x slower), or the GPU-trace
  pattern (a fast mode, the body and a comb of slow spikes); p99/p50 >= 2.2.
- ``flat_tail``: 3-40 % of requests delayed by a roughly uniform amount (density
  tilted by up to +-25 %) reaching 1.5-20x the median; p99/p50 >= 2.2.

The population p99/p50 is measured on 40 000 draws of the same parameters; parameters
are redrawn until it falls in the class's range. The +-10 % band around the default
``tight_ratio`` (2.0) is left out: there the label itself is a coin toss.
Then real-world noise: warm-up outliers (1-5 requests 3-200x the median, most samples),
a few fast outliers (0.3-0.8x), and discretised timers (1 ns, 32 ns or 1 us).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nsysdiag.stats.classifier import SHAPES, classify_tail  # noqa: E402

CLASSES = ("tight", "right_skewed", "multimodal", "flat_tail")
TIGHT_MAX = 1.8
ABNORMAL_MIN = 2.2


def _logu(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _body_sampler(rng):
    """A realistic service-time body: 1-3 close sub-modes, mild right skew."""
    k = int(rng.choice([1, 2, 3], p=[0.5, 0.35, 0.15]))
    span = rng.uniform(1.05, 1.3)  # first to last sub-mode, as in the healthy trace
    locs = (
        span ** np.sort(np.concatenate(([0.0, 1.0], rng.random(k - 2))))[:k]
        if k > 1
        else np.array([1.0])
    )
    weights = rng.dirichlet(np.full(k, 2.0))
    sig = np.array([_logu(rng, 0.015, 0.08) for _ in range(k)])
    jitter = rng.uniform(0.0, 0.04)

    def draw(g, n):
        c = g.choice(k, size=n, p=weights)
        v = locs[c] * np.exp(sig[c] * g.standard_normal(n))
        if jitter > 0:
            v = v + g.exponential(jitter, n)
        return v

    return draw


def _mode_sampler(rng, sigma_lo=0.02, sigma_hi=0.15):
    """A slow/fast mode: log-normal with mild right skew, location 1."""
    sig = _logu(rng, sigma_lo, sigma_hi)
    jitter = rng.uniform(0.0, 0.05)

    def draw(g, n):
        return (
            np.exp(sig * g.standard_normal(n)) + g.exponential(jitter, n)
            if jitter
            else np.exp(sig * g.standard_normal(n))
        )

    return draw


def _sampler(rng, label):
    """Return (variant name, draw(g, n) -> durations with median ~ 1)."""
    body = _body_sampler(rng)
    if label == "tight":
        v = rng.choice(["body", "queue", "lognormal", "close_mode"])
        if v == "body":
            return v, body
        if v == "queue":
            rho, s = rng.uniform(0.1, 1.0), _logu(rng, 0.02, 0.3)

            def draw(g, n):
                b = body(g, n)
                return b + (g.random(n) < rho) * g.exponential(s, n)

            return v, draw
        if v == "lognormal":
            sg = rng.uniform(0.05, 0.25)
            return v, lambda g, n: np.exp(sg * g.standard_normal(n))
        f, w = rng.uniform(1.2, 1.7), rng.uniform(0.005, 0.35)
        mode = _mode_sampler(rng, 0.02, 0.1)

        def draw(g, n):
            b = body(g, n)
            slow = g.random(n) < w
            b[slow] = f * mode(g, int(slow.sum()))
            return b

        return v, draw

    if label == "right_skewed":
        v = rng.choice(["exp_wait", "pareto_wait", "gamma_wait", "lognormal_wait", "lognormal"])
        if v == "lognormal":
            sg = rng.uniform(0.35, 1.0)
            return v, lambda g, n: np.exp(sg * g.standard_normal(n))
        s = _logu(rng, 0.15, 5.0)
        if v == "exp_wait":
            rho = rng.uniform(0.5, 1.0)
            return v, lambda g, n: body(g, n) + (g.random(n) < rho) * g.exponential(s, n)
        if v == "pareto_wait":
            rho, a = rng.uniform(0.5, 1.0), rng.uniform(2.0, 5.0)
            return v, lambda g, n: body(g, n) + (g.random(n) < rho) * s * g.pareto(a, n)
        if v == "gamma_wait":
            kk = rng.uniform(1.0, 4.0)
            return v, lambda g, n: body(g, n) + g.gamma(kk, s / kk, n)
        sd = rng.uniform(0.5, 1.2)
        return v, lambda g, n: body(g, n) + s * np.exp(sd * g.standard_normal(n))

    if label == "multimodal":
        v = rng.choice(["one_slow", "two_slow", "body_copy", "gpu_like"], p=[0.35, 0.2, 0.25, 0.2])
        if v == "body_copy":
            # a fraction of requests run f times slower: a scaled copy of the body,
            # sub-modes and skew included
            f, w = _logu(rng, 1.5, 3.5), rng.uniform(0.03, 0.4)

            def draw(g, n):
                b = body(g, n)
                slow = g.random(n) < w
                b[slow] *= f
                return b

            return v, draw
        if v == "one_slow":
            f, w = _logu(rng, 1.5, 4.0), rng.uniform(0.03, 0.5)
            mode = _mode_sampler(rng, 0.02, 0.15 if f < 2.5 else 0.2)

            def draw(g, n):
                b = body(g, n)
                slow = g.random(n) < w
                b[slow] = f * mode(g, int(slow.sum()))
                return b

            return v, draw
        if v == "two_slow":
            f1 = _logu(rng, 1.5, 3.0)
            f2 = f1 * _logu(rng, 1.5, 2.5)
            w1, w2 = rng.uniform(0.03, 0.3), rng.uniform(0.03, 0.25)
            m1, m2 = _mode_sampler(rng, 0.02, 0.12), _mode_sampler(rng, 0.02, 0.12)

            def draw(g, n):
                b = body(g, n)
                u = g.random(n)
                s1, s2 = u < w1, (u >= w1) & (u < w1 + w2)
                b[s1] = f1 * m1(g, int(s1.sum()))
                b[s2] = f2 * m2(g, int(s2.sum()))
                return b

            return v, draw
        # GPU-trace pattern: a fast mode, the body, a comb of slow spikes.
        ff, wf = rng.uniform(1.5, 2.0), rng.uniform(0.0, 0.25)
        step, nsp = rng.uniform(0.5, 1.0), int(rng.integers(2, 6))
        first = rng.uniform(1.6, 2.2)
        ws = rng.uniform(0.08, 0.3)
        spike = _mode_sampler(rng, 0.015, 0.05)

        def draw(g, n):
            b = body(g, n)
            u = g.random(n)
            fast = u < wf
            slow = (u >= wf) & (u < wf + ws)
            b[fast] = b[fast] / ff
            j = g.integers(0, nsp, int(slow.sum()))
            b[slow] = (first + j * step) * spike(g, int(slow.sum()))
            return b

        return v, draw

    # flat_tail: a fraction of requests delayed by a roughly uniform amount
    w, L, a = rng.uniform(0.03, 0.4), _logu(rng, 1.5, 20.0), rng.uniform(0.8, 1.25)
    v = "uniform_delay"

    def draw(g, n):
        b = body(g, n)
        hit = g.random(n) < w
        b[hit] += L * g.random(int(hit.sum())) ** a
        return b

    return v, draw


# ------------------------------------------------------------------ mechanism samplers
#
# Each class is simulated from the mechanism the method ascribes to it, not drawn as a
# shape: the label comes from the mechanism (and the population p99/p50 gate).

_BURN = 1000  # customers simulated before the measured ones (a queue already running)


def _service_sampler(rng):
    """Service times with median ~1: deterministic, exponential, log-normal, mixtures."""
    kind = str(rng.choice(["det", "exp", "lognormal", "hyperexp", "body_exp"]))
    body = _body_sampler(rng)
    if kind == "det":
        return kind, body
    if kind == "exp":
        return kind, lambda g, n: g.exponential(1.0, n)
    if kind == "lognormal":
        sg = rng.uniform(0.2, 1.0)
        return kind, lambda g, n: np.exp(sg * g.standard_normal(n))
    if kind == "hyperexp":
        q, r = rng.uniform(0.1, 0.5), _logu(rng, 2.0, 8.0)

        def draw(g, n):
            big = g.random(n) < q
            return g.exponential(1.0, n) * np.where(big, r, 1.0)

        return kind, draw
    # a fixed GPU part plus a variable CPU part
    f = rng.uniform(0.2, 2.0)
    return kind, lambda g, n: body(g, n) + g.exponential(f, n)


def _arrivals_sampler(rng, load):
    """Inter-arrival times with mean 1: Poisson, bursty (MMPP) or periodic with jitter.

    Bursts may overload the server (up to 1.5x its capacity) for a few dozen arrivals.
    """
    kind = str(rng.choice(["poisson", "mmpp", "periodic"], p=[0.45, 0.35, 0.2]))
    if kind == "poisson":
        return kind, lambda g, n: g.exponential(1.0, n)
    if kind == "periodic":
        j = rng.uniform(0.05, 1.0)
        return kind, lambda g, n: np.maximum(1.0 + j * (g.random(n) - 0.5) * 2.0, 0.0)
    # two-state Markov-modulated Poisson process, switching per arrival
    hi, frac = _logu(rng, 2.0, 10.0), rng.uniform(0.1, 0.5)  # burst rate ratio, time share
    while load * hi / (frac * hi + 1.0 - frac) > 1.5:
        hi = 1.0 + 0.8 * (hi - 1.0)
    # bursts of 5-50 arrivals: a window of a few hundred requests sees several
    stay = 1.0 - _logu(rng, 0.02, 0.2)

    def draw(g, n):
        # state per arrival: a two-state Markov chain with stationary share of bursts
        p_burst = frac * hi / (frac * hi + (1.0 - frac))
        flips = g.random(n) > stay
        st = np.empty(n, bool)
        s = g.random() < p_burst
        for i in range(n):
            if flips[i]:
                s = g.random() < p_burst
            st[i] = s
        rate = np.where(st, hi, 1.0)
        a = g.exponential(1.0, n) / rate
        return a / a.mean()

    return kind, draw


def _lindley(a, s):
    """Waiting times of a FIFO single-server queue (Lindley's recursion).

    ``W[k+1] = max(0, W[k] + S[k] - A[k+1])`` with an empty queue at the start: the
    running sum minus its running minimum.
    """
    u = np.concatenate(([0.0], np.cumsum(s[:-1] - a[1:])))
    return u - np.minimum.accumulate(u)


def _multi_server(a, s, c):
    """Waiting times of a FIFO c-server queue (event by event, earliest-free server)."""
    import heapq

    t = np.cumsum(a)
    free = [0.0] * c
    w = np.empty(a.size)
    for i in range(a.size):
        f = free[0]
        ti = t[i]
        start = ti if ti > f else f
        w[i] = start - ti
        heapq.heapreplace(free, start + s[i])
    return w


def _queue(rng, c=1):
    load = rng.uniform(0.5, 0.95)
    arr_kind, arrivals = _arrivals_sampler(rng, load)
    svc_kind, service = _service_sampler(rng)
    name = f"queue_{arr_kind}_{svc_kind}" + (f"_c{c}" if c > 1 else "")

    def draw(g, n):
        m = n + _BURN
        s = service(g, m)
        a = arrivals(g, m) * float(np.mean(s)) / (load * c)
        w = _lindley(a, s) if c == 1 else _multi_server(a, s, c)
        return (w + s)[_BURN:]

    return name, draw


def _onoff(rng):
    """A second workload occupies the GPU part of the time (on/off, Markov-modulated).

    Requests run back to back; while the competitor is on, they progress ``1/f`` as
    fast. On and off periods are exponential, several requests long, so most requests
    run wholly inside one state and a few straddle a switch.
    """
    f = _logu(rng, 1.6, 4.0)
    share = rng.uniform(0.15, 0.5)
    # on periods of 4-40 requests (a co-located job's steps outlast a request): a
    # window of a few hundred requests still sees several
    t_on = _logu(rng, 4.0, 40.0)
    t_off = t_on * (1.0 - share) / share
    body = _body_sampler(rng)
    gap = rng.uniform(0.0, 0.5)

    def draw(g, n):
        w = body(g, n)
        out = np.empty(n)
        on = g.random() < share
        left = g.exponential(t_on if on else t_off)
        for i in range(n):
            need, el = w[i], 0.0
            while True:
                rate = 1.0 / f if on else 1.0
                if need <= left * rate:
                    el += need / rate
                    left -= need / rate
                    break
                need -= left * rate
                el += left
                on = not on
                left = g.exponential(t_on if on else t_off)
            out[i] = el
            idle = g.exponential(gap) if gap else 0.0
            while idle > left:
                idle -= left
                on = not on
                left = g.exponential(t_on if on else t_off)
            left -= idle
        return out

    return "onoff_contention", draw


def _clock_drops(rng):
    """Occasional slow kernels: the GPU clock drops for a run of requests."""
    f, p = _logu(rng, 1.5, 3.0), rng.uniform(0.03, 0.3)
    run = _logu(rng, 1.0, 10.0)  # mean length of a slow run, in requests
    body = _body_sampler(rng)

    def draw(g, n):
        leave = 1.0 / run
        enter = leave * p / (1.0 - p)
        u = g.random(n)
        st = np.empty(n, bool)
        s = g.random() < p
        for i in range(n):
            s = (u[i] >= leave) if s else (u[i] < enter)
            st[i] = s
        return body(g, n) * np.where(st, f, 1.0)

    return "clock_drops", draw


def _code_paths(rng):
    """A few discrete code paths of different lengths (2-4 modes)."""
    k = int(rng.integers(2, 5))
    locs = np.concatenate(([1.0], np.cumprod([_logu(rng, 1.5, 3.0) for _ in range(k - 1)])))
    wts = rng.dirichlet(np.full(k, 1.5))
    wts = np.maximum(wts, 0.03)
    wts /= wts.sum()
    modes = [_body_sampler(rng) for _ in range(k)]

    def draw(g, n):
        c = g.choice(k, size=n, p=wts)
        out = np.empty(n)
        for j in range(k):
            m = c == j
            out[m] = locs[j] * modes[j](g, int(m.sum()))
        return out

    return f"code_paths_{k}", draw


def _transfer_contention(rng):
    """A copy waits for a competing transfer of random remaining length.

    With probability ``w`` a competing transfer holds the link when the copy is issued;
    the copy waits for its remaining part, uniform over the competitor's length (a
    competitor of length ``L``, with mild spread); or the two share the link for a
    random overlap (``link_share``), the copy slowed over a uniform part of it.
    """
    kind = str(rng.choice(["wait_remaining", "link_share", "periodic_competitor"]))
    body = _body_sampler(rng)
    w, length = rng.uniform(0.03, 0.4), _logu(rng, 1.5, 20.0)
    spread = rng.uniform(0.0, 0.15)

    def draw(g, n):
        b = body(g, n)
        hit = g.random(n) < w
        k = int(hit.sum())
        big = length * np.exp(spread * g.standard_normal(k))
        if kind == "link_share":
            # both at half bandwidth during a uniform overlap: the extra time is the
            # overlap (up to the competitor's length)
            b[hit] += big * g.random(k)
        elif kind == "periodic_competitor":
            # a competitor of fixed length every period: a copy issued inside it waits
            # for the rest
            b[hit] += length * g.random(k)
        else:
            b[hit] += big * g.random(k)
        return b

    return kind, draw


def _light_queue(draw, rng, lo=0.02, hi=0.15):
    """The same durations as service of a lightly loaded Poisson queue (a mixture)."""
    load = rng.uniform(lo, hi)

    def out(g, n):
        s = draw(g, n + _BURN)
        a = g.exponential(1.0, s.size) * float(np.mean(s)) / load
        return (_lindley(a, s) + s)[_BURN:]

    return out


def _mechanism_sampler(rng, label):
    """Return (variant name, draw(g, n)) simulating the mechanism of ``label``."""
    if label == "tight":
        v = str(rng.choice(["body", "light_queue", "small_contention"]))
        body = _body_sampler(rng)
        if v == "body":
            return v, body
        if v == "light_queue":
            return v, _light_queue(body, rng, 0.02, 0.4)
        w, length = rng.uniform(0.01, 0.5), rng.uniform(0.05, 0.6)

        def draw(g, n):
            b = body(g, n)
            hit = g.random(n) < w
            b[hit] += length * g.random(int(hit.sum()))
            return b

        return v, draw
    if label == "right_skewed":
        v = str(rng.choice(["single", "multi", "scheduler"], p=[0.6, 0.25, 0.15]))
        if v == "single":
            name, draw = _queue(rng)
        elif v == "multi":
            name, draw = _queue(rng, c=int(rng.integers(2, 9)))
        else:
            # thread pool: c workers, Poisson arrivals, log-normal work, plus an OS
            # wake-up delay (exponential) for requests that found every worker busy
            c = int(rng.integers(2, 17))
            load, sg = rng.uniform(0.5, 0.95), rng.uniform(0.1, 0.6)
            wake = _logu(rng, 0.01, 0.3)

            def draw(g, n):
                m = n + _BURN
                s = np.exp(sg * g.standard_normal(m))
                a = g.exponential(1.0, m) * float(np.mean(s)) / (load * c)
                w = _multi_server(a, s, c)
                w = w + (w > 0) * g.exponential(wake, m)
                return (w + s)[_BURN:]

            name = f"thread_pool_c{c}"
        if rng.random() < 0.2:  # mixture: mild GPU jitter in the service
            f = rng.uniform(1.05, 1.3)
            inner = draw

            def draw(g, n, inner=inner, f=f):
                return inner(g, n) * np.where(g.random(n) < 0.3, f, 1.0)

            name += "+jitter"
        return name, draw
    if label == "multimodal":
        v = str(rng.choice(["onoff", "clock", "paths"], p=[0.45, 0.25, 0.3]))
        name, draw = {"onoff": _onoff, "clock": _clock_drops, "paths": _code_paths}[v](rng)
    else:
        name, draw = _transfer_contention(rng)
    if rng.random() < 0.25:  # mixture: a lightly loaded queue in front
        draw = _light_queue(draw, rng, 0.01, 0.08)
        name += "+light_queue"
    return name, draw


def make_sample(rng: np.random.Generator, label: str, n: int, mechanism: bool = True):
    """One labelled sample: (durations in ns as float, variant, population p99/p50).

    ``mechanism`` chooses the mechanism simulations (default) or the shapes drawn to
    order (the earlier benchmark).
    """
    check = np.random.default_rng(rng.integers(2**63))
    sampler = _mechanism_sampler if mechanism else _sampler
    for _ in range(200):
        variant, draw = sampler(rng, label)
        pop = draw(check, 40_000)
        ratio = float(np.quantile(pop, 0.99) / np.quantile(pop, 0.5))
        if label == "tight" and ratio <= TIGHT_MAX:
            break
        if label != "tight" and ratio >= ABNORMAL_MIN:
            break
    else:  # pragma: no cover - parameter ranges make this practically unreachable
        raise RuntimeError(f"could not draw a {label} sample")
    med = float(np.median(pop))
    quantum = float(rng.choice([1.0, 32.0, 1000.0], p=[0.4, 0.3, 0.3]))
    lo_med = 50_000.0 if quantum >= 1000 else 30_000.0
    scale = _logu(rng, lo_med, 30e6) / med
    x = draw(rng, n) * scale
    # warm-up outliers first, a few fast outliers anywhere
    if rng.random() < 0.7:
        k = int(rng.integers(1, 2 + min(4, n // 200)))
        x[:k] = scale * med * np.exp(rng.uniform(math.log(3), math.log(200), k))
    if rng.random() < 0.3:
        k = int(rng.integers(1, 2 + min(4, n // 200)))
        idx = rng.integers(0, n, k)
        x[idx] = scale * med * rng.uniform(0.3, 0.8, k)
    x = np.maximum(np.round(x / quantum), 1.0) * quantum
    return x, str(variant), ratio


def _one(args):
    seed, i, label, mechanism = args
    rng = np.random.default_rng([seed, i])
    n = int(round(math.exp(rng.uniform(math.log(50), math.log(100_000)))))
    x, variant, ratio = make_sample(rng, label, n, mechanism)
    t0 = time.perf_counter()
    res = classify_tail(x, rng=0)
    dt = time.perf_counter() - t0
    row = dict(
        seed=seed,
        i=i,
        label=label,
        variant=variant,
        n=n,
        ratio=ratio,
        window_ratio=float(np.quantile(x, 0.99) / np.quantile(x, 0.5)),
        shape=res.shape,
        confidence=res.confidence,
        seconds=dt,
    )
    row["probabilities"] = (
        res.probabilities.as_array().tolist() if res.probabilities is not None else None
    )
    if res.success:
        row["stats"] = res.statistics
    return row


def ece(conf, correct, bins=10):
    """Expected calibration error with ``bins`` equal-width bins over [0, 1].

    ``sum_b (n_b / n) |accuracy_b - mean confidence_b|`` over the bins of ``conf``; 0 for
    an empty sample.
    """
    conf, correct = np.asarray(conf, float), np.asarray(correct, float)
    if conf.size == 0:
        return 0.0
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if np.any(m):
            total += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return total


def classwise_ece(probs, labels, bins=10):
    """Classwise ECE (Kull et al. 2019), one figure per class of :data:`CLASSES`.

    For class k: the predicted probability of k on *every* sample, in ``bins``
    equal-width bins, against the frequency of true class k in each bin --
    ``ece(probs[:, k], labels == k)``. ``probs`` is (samples x classes), ``labels`` the
    true class names.
    """
    probs, labels = np.asarray(probs, float), np.asarray(labels)
    return {c: ece(probs[:, k], labels == c, bins) for k, c in enumerate(CLASSES)}


def print_ece_table(rep_all, rep_big, indent):
    """One row per class: classwise, per-verdict and per-true-class ECE, each over all
    sizes and over n >= 200 (``rep_all``/``rep_big`` from :func:`calibration_report`)."""
    print(f"{indent}{'class':<14}{'classwise':>20}{'verdict':>20}{'true class':>20}")
    for c in CLASSES:
        cells = "".join(
            f"{rep_all[k][c]:>10.4f}{rep_big[k][c]:>10.4f}"
            for k in ("classwise", "verdict", "true_class")
        )
        print(f"{indent}{c:<14}{cells}")


def calibration_report(labels, shapes, probs, conf):
    """The three per-class calibration figures: {name: {class: ECE}}.

    ``classwise``: :func:`classwise_ece`. ``verdict``: among the samples given verdict
    k, confidence against being right. ``true_class``: among the samples of true class
    k, the confidence of whatever verdict they got against being right (not a
    calibration measure on its own: it mixes verdicts).
    """
    labels, shapes = np.asarray(labels), np.asarray(shapes)
    conf = np.asarray(conf, float)
    correct = labels == shapes
    out = {"classwise": classwise_ece(probs, labels), "verdict": {}, "true_class": {}}
    for c in CLASSES:
        mv, mt = shapes == c, labels == c
        out["verdict"][c] = ece(conf[mv], correct[mv])
        out["true_class"][c] = ece(conf[mt], correct[mt])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--seed",
        default="4099",
        help="generator seed (default 4099, the held-out seed); SEED[:COUNT],... "
        "pools several seeds, each with its own count (default --count)",
    )
    ap.add_argument("--count", type=int, default=800, help="number of samples (default 800)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--dump", default="", help="write per-sample rows to this CSV file")
    ap.add_argument(
        "--save",
        default="",
        help="pickle the per-sample rows, with the classifier's statistics, to this file "
        "(input of bench/fit_calibration.py --rows)",
    )
    ap.add_argument(
        "--shapes",
        action="store_true",
        help="draw the earlier benchmark's shapes to order instead of simulating the "
        "mechanisms",
    )
    args = ap.parse_args(argv)

    mech = not args.shapes
    try:
        seeds = [
            (int(a), int(b or args.count))
            for a, _, b in (item.partition(":") for item in str(args.seed).split(","))
        ]
    except ValueError:
        ap.error(f"--seed must be SEED or SEED:COUNT,...; got {args.seed!r}")
    tasks = [(s, i, CLASSES[i % len(CLASSES)], mech) for s, c in seeds for i in range(c)]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            rows = list(ex.map(_one, tasks, chunksize=8))
    else:
        rows = [_one(t) for t in tasks]
    wall = time.perf_counter() - t0

    if args.dump:
        import csv

        fields = [k for k in rows[0] if k not in ("features", "stats")]
        with open(args.dump, "w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            wr.writeheader()
            wr.writerows(rows)
    if args.save:
        import pickle

        with open(args.save, "wb") as fh:
            pickle.dump(rows, fh)

    labels = np.array([r["label"] for r in rows])
    shapes = np.array([r["shape"] for r in rows])
    ns = np.array([r["n"] for r in rows])
    conf = np.array([r["confidence"] for r in rows])
    correct = labels == shapes
    big = ns >= 200
    secs = np.array([r["seconds"] for r in rows])

    kind = "mechanisms simulated" if mech else "shapes drawn to order (--shapes)"
    print(
        f"tail-shape classifier benchmark, {kind}: seed={args.seed} count={len(rows)} "
        f"sizes 50..100000 (log-uniform), {big.sum()} samples with n >= 200"
    )
    print(f"{'class':<14}{'count':>7}{'acc':>8}{'count>=200':>12}{'acc>=200':>10}")
    for c in CLASSES:
        m = labels == c
        mb = m & big
        print(
            f"{c:<14}{m.sum():>7}{correct[m].mean():>8.3f}{mb.sum():>12}"
            f"{correct[mb].mean() if mb.any() else float('nan'):>10.3f}"
        )
    print(
        f"{'all':<14}{len(rows):>7}{correct.mean():>8.3f}{big.sum():>12}"
        f"{correct[big].mean():>10.3f}"
    )
    print()
    print("confusion matrix (rows: true, columns: predicted)")
    print(" " * 14 + "".join(f"{s[:12]:>13}" for s in SHAPES))
    for c in CLASSES:
        m = labels == c
        print(f"{c:<14}" + "".join(f"{np.sum(shapes[m] == s):>13d}" for s in SHAPES))
    # Step A on the window itself: a window of an abnormal mechanism whose own p99/p50
    # (all values, outliers included) is at most the gate's 2.0 shows no abnormal tail,
    # and the method's answer for it is `tight` whatever the mechanism (a window inside
    # one long busy period of a queue delays every request alike).
    win = np.array([r["window_ratio"] for r in rows])
    gated = (labels != "tight") & (win <= 2.0)
    truth = np.where(gated, "tight", labels)
    right_a = truth == shapes
    print()
    print(
        "windows of abnormal mechanisms whose own p99/p50 <= 2 (step A: tight), "
        "n >= 200: "
        + ", ".join(f"{c} {int(np.sum(gated & big & (labels == c)))}" for c in CLASSES[1:])
    )
    print(
        "accuracy n >= 200 with those counted as tight: "
        + ", ".join(
            f"{c} {right_a[(labels == c) & big].mean():.3f}" for c in CLASSES if c != "tight"
        )
    )
    print()
    probs = np.array(
        [r["probabilities"] if r["probabilities"] is not None else [0.0] * 4 for r in rows]
    )
    e_all, e_big = ece(conf, correct), ece(conf[big], correct[big])
    print(
        f"ECE (10 bins): {e_all:.4f} all sizes, {e_big:.4f} n >= 200; "
        f"mean confidence {conf.mean():.3f}, accuracy {correct.mean():.3f}"
    )
    rep_all = calibration_report(labels, shapes, probs, conf)
    rep_big = calibration_report(labels[big], shapes[big], probs[big], conf[big])
    print(
        "ECE per class (10 bins; all sizes | n >= 200):\n"
        "  classwise: P(class) on every sample against the frequency of the class "
        "(Kull et al. 2019)\n"
        "  verdict:   confidence of the samples given that verdict against being right\n"
        "  true class: confidence of the samples of that class against being right"
    )
    print_ece_table(rep_all, rep_big, "  ")
    for c in CLASSES:
        mv = shapes == c
        print(
            f"  verdict {c:<14} {mv.sum():4d} verdicts, mean confidence "
            f"{conf[mv].mean() if mv.any() else float('nan'):.3f}, right "
            f"{correct[mv].mean() if mv.any() else float('nan'):.3f}"
        )
    print("reliability (confidence bin: count, mean confidence, accuracy)")
    idx = np.minimum((conf * 10).astype(int), 9)
    for b in range(10):
        m = idx == b
        if m.any():
            print(
                f"  [{b / 10:.1f},{(b + 1) / 10:.1f}): {m.sum():5d}  {conf[m].mean():.3f}"
                f"  {correct[m].mean():.3f}"
            )
    print()
    print(
        f"time: {wall:.1f} s wall on {args.jobs} process(es); per call mean "
        f"{secs.mean() * 1e3:.1f} ms, max {secs.max() * 1e3:.0f} ms"
    )
    acc_cls = [correct[(labels == c) & big].mean() for c in CLASSES]
    ok = (
        min(acc_cls) >= 0.95
        and e_all <= 0.05
        and max(rep_all["classwise"].values()) <= 0.05
        and max(rep_all["verdict"].values()) <= 0.05
    )
    worst_true = max(rep_all["true_class"].values())
    print(
        "targets (accuracy n>=200 >= 0.95 per class; ECE <= 0.05 overall, classwise and "
        f"per verdict, all sizes): {'met' if ok else 'NOT met'}; per true class at most "
        f"{worst_true:.4f} (aim <= 0.05)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
