"""nsysdiag.jit: compiled loops still work where numba cannot cache them."""

from __future__ import annotations

import numba

from nsysdiag import jit as jit_module


def test_compiles_without_a_cache_location(monkeypatch):
    real = numba.njit
    calls = []

    def njit(cache=False, **options):
        calls.append(cache)
        if cache:
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x'")
        return real(**options)

    monkeypatch.setattr(jit_module, "njit", njit)

    @jit_module.jit()
    def total(n):
        s = 0
        for i in range(n):
            s += i
        return s

    assert total(10) == 45
    assert calls == [True, False]
