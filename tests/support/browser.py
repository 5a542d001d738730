"""A report opened in a real browser: Debian's Chromium driven by Playwright (PyPI), started
the way this machine allows (no sandbox as root, no background networking), or a skip that
says which of the two is missing (.ci/run installs both)."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (Debian package `chromium`; .ci/run installs it)")


def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (PyPI, in the dev extras)")
    return sync_playwright()
