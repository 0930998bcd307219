"""PEP 517 backend shim: setuptools.build_meta, found offline.

pip builds in an isolated environment and would download ``setuptools`` from
PyPI; on an offline Debian host only the system's setuptools (python3-setuptools)
exists. This shim declares no build requirements and, when setuptools is not
importable in the isolated environment, adds the interpreter's own site
directory that holds it (or Debian's bundled setuptools wheel), then re-exports
``setuptools.build_meta``.
"""
import glob
import os
import site
import sys


def _find_setuptools() -> None:
    try:
        import setuptools  # noqa: F401
        return
    except ImportError:
        pass
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    dirs += ["/usr/lib/python3/dist-packages",
             f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages",
             "/usr/local/lib/python3/dist-packages"]
    for d in dirs:
        if os.path.isdir(os.path.join(d, "setuptools")):
            sys.path.append(d)
            return
    wheels = sorted(glob.glob("/usr/share/python-wheels/setuptools-*.whl"))
    if wheels:
        sys.path.append(wheels[-1])
        return
    raise ImportError("setuptools is needed to build warren-sdk: apt-get install "
                      "python3-setuptools (or pip install setuptools)")


_find_setuptools()

from setuptools.build_meta import *  # noqa: E402,F401,F403
from setuptools.build_meta import __all__  # noqa: E402,F401


def _extra(names):
    """Requirements setuptools asks pip for (``wheel``) unless already importable,
    so an offline build does not try to download them."""
    import importlib.util
    return [n for n in names if importlib.util.find_spec(n) is None]


def get_requires_for_build_wheel(config_settings=None):  # noqa: F811
    return _extra(["wheel"])


def get_requires_for_build_sdist(config_settings=None):  # noqa: F811
    return []


def get_requires_for_build_editable(config_settings=None):  # noqa: F811
    return _extra(["wheel"])
