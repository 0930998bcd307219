"""Offline SDK tests: no daemon, httpx.MockTransport instead.

Run with ``/usr/bin/python3 -m pytest sdk/python/tests``. The package is
imported from the source tree (no install needed).
"""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
