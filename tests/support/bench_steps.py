"""A benchmark step the harness test runs in a fresh Python (tests/test_bench_smoke.py)."""


def allocate(mb: str) -> dict:
    """Touch `mb` megabytes, so that the process's peak RSS shows them."""
    block = bytearray(int(mb) * 2**20)
    block[::4096] = bytes(len(range(0, len(block), 4096)))
    return {"mb": int(mb)}
